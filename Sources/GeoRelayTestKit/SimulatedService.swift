import GeoRelayCore

/// A server on the simulated network (`SimulatedNetwork`): a session for each connection it
/// accepts, fed the bytes that reach it, answering with what it does next.
package protocol SimulatedService: Sendable {
    /// A connection reached the server (its handshake crossed the link); `number` counts them from 1.
    func accept(connection number: Int) -> any SimulatedSession
}

/// One accepted connection's server side. Called on the network's thread only, in the order
/// the bytes arrive.
package protocol SimulatedSession: AnyObject {
    /// Bytes from the client reached the server at `now`.
    func received(_ bytes: [UInt8], at now: RelayInstant) -> [SimulatedReply]
    /// Bytes the server holds and has not read (a request behind the one it answered): closing
    /// with them unread resets the connection, as the kernel does.
    var holdsUnread: Bool { get }
}

/// What a server does with a connection, `after` its own processing time (answers leave in the
/// order they are given, never before the one before them).
package enum SimulatedReply: Sendable {
    case send([UInt8], after: Duration = .zero)
    /// Closes. `lingering`: the way nginx closes after its last answer: its side shut, what the
    /// client still sends read and dropped, so the client sees a clean end; otherwise a close with
    /// unread bytes, or bytes arriving after it, resets the connection.
    case close(lingering: Bool, after: Duration = .zero)
    /// Closes with a reset at once (`SO_LINGER` 0).
    case reset(after: Duration = .zero)
}

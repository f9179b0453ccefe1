import GeoRelayCore

/// Why a connection could not be opened or is of no more use (refused, reset, timed out, a TLS
/// failure), in words for the round's log and the destination's status.
package struct ConnectionFailure: Error, Sendable {
    package let message: String

    package init(_ message: String) {
        self.message = message
    }
}

/// One connection as a round's driver sees it: bytes in and out, never blocking.
///
/// - Important: when `send` takes fewer bytes than offered (0 when it would block), offer the rest
///   again from the first byte not taken and no shorter (OpenSSL requires it of a write it could
///   not finish: `CurlConnection`).
package protocol RoundConnection: AnyObject {
    /// Takes what the connection takes now of `bytes` from `offset` on.
    /// - Returns: the number of bytes taken; 0 when it would block (wait for writable).
    func send(_ bytes: [UInt8], from offset: Int) throws(ConnectionFailure) -> Int
    /// Reads what has arrived into `buffer`.
    /// - Returns: the number of bytes read; nil when nothing is there now; 0 when the peer closed.
    func receive(into buffer: UnsafeMutableRawBufferPointer) throws(ConnectionFailure) -> Int?
    /// Open, and nothing arrived on it that nobody asked for: a kept connection fit to reuse.
    var isQuiet: Bool { get }
    /// How far its handshake has got, for one `RoundNetwork.connect` began.
    var progress: ConnectProgress { get }
}

extension RoundConnection {
    package var progress: ConnectProgress { .open }
}

/// How far a connection `RoundNetwork.connect` began has got.
package enum ConnectProgress: Equatable, Sendable {
    case connecting
    case open
    case failed(String)
}

/// What the driver's wait found of one connection it asked about.
package struct ConnectionReadiness: Equatable, Sendable {
    /// Its place in the list the driver asked about.
    package var index: Int
    /// It takes bytes again (asked only of a connection with bytes to write).
    package var writable: Bool

    package init(index: Int, writable: Bool) {
        self.index = index
        self.writable = writable
    }
}

/// Where a round's connections come from and how its driver waits on them: the seam between the
/// rounds, which are state machines without I/O, and the network. The daemon's is libcurl's and
/// the kernel's `poll` (`CurlNetwork`); the tests' is a simulated link and server on simulated
/// time (the test kit's `SimulatedNetwork`), so a round's behaviour over a satellite's round trip,
/// an outage or a terminal is proven in milliseconds and replays from a seed.
///
/// One driver's, on the driver's thread; only `wake` may be called from another.
package protocol RoundNetwork: AnyObject {
    /// Opens a connection to the destination, blocking for at most the connect timeout.
    func open() throws(ConnectionFailure) -> any RoundConnection
    /// Begins a connection without waiting for its handshake: a `wait` that asks about it (as
    /// writing) returns once it is open or has failed (`progress`). A fleet's connections then
    /// cost one round trip together, not one each, and the driver reads and writes the others
    /// meanwhile. (The daemon's does so for Teltonika's rounds; the others open a lane at a time.)
    func connect() throws(ConnectionFailure) -> any RoundConnection
    /// Waits until a connection of `polled` is readable, or writable where asked, or has failed;
    /// until `deadline` (nil: a second at most, so the driver's loop sees its flags); or until
    /// `wake` is called.
    /// - Returns: the connections that are ready, by their place in `polled`.
    func wait(_ polled: [(connection: any RoundConnection, writing: Bool)], until deadline: RelayInstant?)
        -> [ConnectionReadiness]
    /// Ends a wait from another thread (an alarm, a shutdown, a live fix).
    var wake: @Sendable () -> Void { get }
    /// Lets go of what the network holds for the next `open` (a connection the link's return
    /// check opened): the route moved.
    func dropKept()
}

extension RoundNetwork {
    package func dropKept() {}
    package func connect() throws(ConnectionFailure) -> any RoundConnection { try open() }
}

import CCurl
import GeoRelayCore

/// One connection to Traccar's Teltonika port, identified as one device (or as the probe).
///
/// Traccar binds a connection to the devices identified on it and attributes a data frame
/// to any of them, so a session never carries more than one id. It identifies once per
/// connection: the id goes first, alone when it is long enough for Traccar's frame decoder
/// to cut it (12 bytes), else in the same write as the first data frame
/// (`TeltonikaCodec.identificationNeedsCompanion`); after a `0x01`, data frames follow, each
/// answered with its record count. Once identified, frames may go back to back before their
/// answers: Traccar's frame decoder cuts every whole frame out of what it has read and the
/// protocol decoder answers each in turn, so the answers come in the frames' order.
///
/// Non-blocking after `connect()`: the owner polls `descriptor`, calls `flush()` when it is
/// writable and `receive(into:)` when it is readable, and gets events back. `CurlConnection`
/// does DNS, TCP and, for `tls://`, the handshake and certificate checks.
///
/// How a connection ends matters to the owner (`Break`): Traccar refuses a frame it cannot
/// decode by closing the connection (a clean close, after it answered the id); everything
/// else (a reset, a close before any answer, bytes that are not Traccar's) is the link's or a
/// middlebox's doing, and proves nothing about the frame.
///
/// Not `Sendable`: confine it to one thread.
final class TeltonikaSession {
    /// What the owner learns from the connection.
    enum Event: Equatable {
        /// The id's 1-byte answer. After `.unknown` Traccar drops data frames unanswered.
        case identified(TeltonikaCodec.IdentificationAnswer)
        /// A data frame's 4-byte answer: the number of records Traccar decoded.
        case acknowledged(Int)
        /// The connection is finished (and closed): nothing more will be answered on it.
        case broken(Break)
    }

    /// How a connection ended with something unanswered.
    enum Break: Equatable {
        /// A clean close after the id was answered `0x01`, with a data frame unanswered:
        /// how Traccar refuses a frame it cannot decode, and also what a dying link can look like.
        case closedUnanswered
        /// Bytes that are not Traccar's answer: something else listens there.
        case notTraccar(String)
        /// Reset, refused, closed before the id's answer, or failed otherwise: the link, not the frame.
        case failed(String)
    }

    /// Where the port is and how to reach it.
    struct Endpoint: Sendable {
        /// What `CurlConnection` connects to: `telnet://` (plain TCP, no handshake of its own)
        /// for `tcp://`, `https://` (curl's TLS handshake and certificate checks) for `tls://`.
        var curlURL: String
        var tls: Configuration.TLSSettings
        var connectTimeoutSeconds: Double
        /// Where the connections' bytes are billed (the destination's meter).
        var meter: WireMeter?

        /// The port Traccar's Teltonika decoder listens on by default.
        static let defaultPort = 5027

        init(settings: Configuration.DestinationSettings, meter: WireMeter? = nil) throws(CurlError) {
            curlURL = try Self.curlURL(settings.url)
            tls = settings.tls
            connectTimeoutSeconds = settings.connectTimeoutSeconds
            self.meter = meter
        }

        /// `tcp://host[:port][/]` → `telnet://host:port`, `tls://host[:port][/]` → `https://host:port`
        /// (5027 when no port is given). libcurl's telnet handler does nothing at connect time, so
        /// with `CONNECT_ONLY` it leaves a bare TCP connection; its https handler leaves one after
        /// the TLS handshake.
        static func curlURL(_ url: String) throws(CurlError) -> String {
            let lowered = url.lowercased()
            let scheme: String
            if lowered.hasPrefix("tcp://") {
                scheme = "telnet"
            } else if lowered.hasPrefix("tls://") {
                scheme = "https"
            } else {
                throw CurlError(
                    CURLE_URL_MALFORMAT,
                    message: "expected a tcp:// or tls:// URL for the Teltonika port, not \(Redaction.url(url))")
            }
            var authority = url.dropFirst("tcp://".count)
            while authority.hasSuffix("/") { authority = authority.dropLast() }
            guard !authority.isEmpty, !authority.contains("/"), !authority.contains("@"), !authority.contains("?")
            else {
                throw CurlError(
                    CURLE_URL_MALFORMAT,
                    message: "expected tcp://host:port or tls://host:port, not \(Redaction.url(url))")
            }
            // A port follows the last colon, unless that colon is inside an IPv6 literal's brackets.
            let hasPort = authority.lastIndex(of: ":").map { colon in !authority[colon...].contains("]") } ?? false
            return "\(scheme)://\(authority)" + (hasPort ? "" : ":\(defaultPort)")
        }
    }

    let identification: [UInt8]
    private let endpoint: Endpoint
    private(set) var connection: CurlConnection?
    /// The id was answered `0x01` on this connection: data frames go without identifying again.
    private(set) var isKnown = false
    /// Bytes queued for the socket; offered again from `sentBytes` until taken (see `CurlConnection`).
    private var output: [UInt8] = []
    private var sentBytes = 0
    /// A data frame waiting for the id's answer (a long id goes alone first).
    private var afterIdentification: [UInt8]?
    private var input: [UInt8] = []
    /// The answers the server owes, in order.
    private var awaiting: [Expectation] = []
    /// When bytes last moved either way: the request timeout counts from here.
    private(set) var lastProgress = ContinuousClock.now
    /// Wire bytes already handed to `takeWireBytes()` from the current connection.
    private var countedBytes = 0
    /// Wire bytes of connections already closed, not yet handed out.
    private var closedBytes = 0
    /// Events of the last read that `nextEvent` has not returned yet: one read can carry several
    /// answers (the id's `0x01` and the count of the frame it let go), and it returns one at a time.
    private var unreported: [Event] = []

    private enum Expectation {
        case identification
        case count
    }

    /// - Throws: `TeltonikaCodecError` when `uniqueID` cannot identify on the port (not ASCII, empty).
    init(uniqueID: String, endpoint: Endpoint) throws(TeltonikaCodecError) {
        identification = try TeltonikaCodec.identification(uniqueID: uniqueID)
        self.endpoint = endpoint
    }

    var isConnected: Bool { connection != nil }
    var descriptor: Int32 { connection?.descriptor ?? -1 }
    var hasOutput: Bool { sentBytes < output.count }
    /// An answer is owed: the request timeout applies.
    var isAwaiting: Bool { !awaiting.isEmpty }

    /// Connects (blocking for at most the connect timeout), unless connected already.
    func connect() throws(CurlError) {
        guard connection == nil else { return }
        let connection = try CurlConnection(
            url: endpoint.curlURL, tls: endpoint.tls, connectTimeoutSeconds: endpoint.connectTimeoutSeconds,
            meter: endpoint.meter)
        try connection.connect()
        self.connection = connection
        countedBytes = 0
        lastProgress = .now
    }

    /// Queues a data frame (identifying first on a fresh connection) and sends what the socket takes.
    /// - Precondition: connected; and nothing awaited, or the id answered `0x01` (frames behind
    ///   frames, never behind an identification whose answer may drop them).
    func send(frame: [UInt8]) -> Event? {
        precondition(
            connection != nil && (awaiting.isEmpty || (isKnown && afterIdentification == nil)),
            "TeltonikaSession.send behind an unanswered identification, or with no connection")
        if !hasOutput {
            output.removeAll(keepingCapacity: true)
            sentBytes = 0
        }
        if isKnown {
            output.append(contentsOf: frame)
            awaiting.append(.count)
        } else if TeltonikaCodec.identificationNeedsCompanion(identification) {
            output = identification + frame
            awaiting = [.identification, .count]
        } else {
            output = identification
            afterIdentification = frame
            awaiting = [.identification]
        }
        lastProgress = .now
        return flush()
    }

    /// Queues the identification alone (the probe), and sends it.
    func identify() -> Event? {
        precondition(
            connection != nil && awaiting.isEmpty && !isKnown,
            "TeltonikaSession.identify on a busy or identified connection")
        output = identification
        sentBytes = 0
        awaiting = [.identification]
        lastProgress = .now
        return flush()
    }

    /// Sends what the socket takes of the queued bytes.
    func flush() -> Event? {
        guard let connection, hasOutput else { return nil }
        do throws(CurlError) {
            while hasOutput {
                let taken = try connection.send(output, from: sentBytes)
                if taken == 0 { break }
                sentBytes += taken
                lastProgress = .now
            }
            return nil
        } catch {
            return fail(failure(error))
        }
    }

    /// What a connection's error says. With frames back to back, Traccar's refusal of the first
    /// unanswered one looks like a reset, not a clean close: it closes with the frames behind it
    /// unread (or arriving after), and the kernel answers those with a reset. So a reset with more
    /// than one frame unanswered makes the first the suspect, which goes again alone, where a reset
    /// is the link's again.
    private func failure(_ error: CurlError) -> Break {
        isKnown && awaiting.count(where: { $0 == .count }) > 1 ? .closedUnanswered : .failed(error.message)
    }

    /// Reads what arrived (until the socket would block: over TLS curl may hold decrypted bytes)
    /// and returns the answers in it, in order; a `.broken` event is always the last.
    func receive(into scratch: UnsafeMutableRawBufferPointer) -> [Event] {
        guard let connection else { return [] }
        var events: [Event] = []
        do throws(CurlError) {
            while let count = try connection.receive(into: scratch) {
                if count == 0 {
                    // The peer closed. Only after a `0x01` with a frame unanswered is that Traccar's refusal.
                    let refusal = isKnown && awaiting.first == .count
                    guard !awaiting.isEmpty else { return events + [fail(.failed("the server closed the connection"))] }
                    return events + [
                        fail(
                            refusal
                                ? .closedUnanswered
                                : .failed("the server closed the connection before answering the identification"))
                    ]
                }
                lastProgress = .now
                input.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                while let event = nextAnswer() {
                    events.append(event)
                    if case .broken = event { return events }
                }
            }
        } catch {
            events.append(fail(failure(error)))
        }
        return events
    }

    /// The next whole answer in `input`, if any.
    private func nextAnswer() -> Event? {
        guard !input.isEmpty else { return nil }
        guard let expected = awaiting.first else {
            return fail(.notTraccar("\(input.count) bytes nobody asked for"))
        }
        switch expected {
        case .identification:
            let byte = input.removeFirst()
            awaiting.removeFirst()
            do throws(TeltonikaCodecError) {
                let answer = try TeltonikaCodec.identificationAnswer(byte)
                isKnown = answer == .known
                if isKnown, let frame = afterIdentification {
                    afterIdentification = nil
                    output = frame
                    sentBytes = 0
                    awaiting = [.count]
                    if let broken = flush() { return broken }
                } else if answer == .unknown {
                    // Traccar drops a companion frame unanswered; nothing more will come.
                    awaiting.removeAll()
                    afterIdentification = nil
                }
                return .identified(answer)
            } catch {
                return fail(.notTraccar(error.message))
            }
        case .count:
            guard input.count >= 4 else { return nil }
            let answer = input.prefix(4)
            input.removeFirst(4)
            awaiting.removeFirst()
            do throws(TeltonikaCodecError) {
                return .acknowledged(try TeltonikaCodec.parseAcknowledgement(answer))
            } catch {
                return fail(.notTraccar(error.message))
            }
        }
    }

    /// Ends the connection, as a `.broken` event.
    func fail(_ reason: Break) -> Event {
        close()
        return .broken(reason)
    }

    /// Closes the connection; the session can connect again (and identifies again).
    func close() {
        if let connection {
            closedBytes += connection.bytesSent + connection.bytesReceived - countedBytes
        }
        connection = nil
        isKnown = false
        output.removeAll()
        sentBytes = 0
        afterIdentification = nil
        input.removeAll()
        awaiting.removeAll()
        // A closed connection's answers mean nothing to the next one (`nextEvent` keeps the ones
        // read with a `.broken` after this, which runs inside `receive`).
        unreported.removeAll()
        countedBytes = 0
    }

    /// Application bytes sent and received (TLS records not included) since the last call, for
    /// the uplink counters.
    func takeWireBytes() -> Int {
        var bytes = closedBytes
        closedBytes = 0
        if let connection {
            let total = connection.bytesSent + connection.bytesReceived
            bytes += total - countedBytes
            countedBytes = total
        }
        return bytes
    }

    /// Blocks until the next event, `deadline`, or `abort` (checked every quarter of a second),
    /// for a one-off exchange on a thread of its own (the probe, `georelay send`). Nil: no event in time.
    ///
    /// Events come out one per call, in order, even when one read brought several: the rest are
    /// kept for the next calls (which return them without waiting, even after a `.broken` among
    /// them closed the connection), never dropped.
    func nextEvent(before deadline: ContinuousClock.Instant, abort: AbortFlag? = nil) -> Event? {
        if !unreported.isEmpty { return unreported.removeFirst() }
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 1)
        defer { scratch.deallocate() }
        let clock = ContinuousClock()
        while abort?.isSet != true, clock.now < deadline, let connection {
            let slice = min(clock.now.duration(to: deadline), .milliseconds(250))
            guard let ready = try? connection.wait(readable: true, writable: hasOutput, timeout: max(slice, .zero))
            else {
                return fail(.failed("the connection's socket failed"))
            }
            if ready.writable, let event = flush() { return event }
            if ready.readable {
                var events = receive(into: scratch)
                if !events.isEmpty {
                    let first = events.removeFirst()
                    unreported = events
                    return first
                }
            }
        }
        return nil
    }

    /// A connection idle since its last answer that the server closed meanwhile, or that has
    /// bytes nobody asked for, is not worth a frame: checked before reuse.
    var isStale: Bool {
        guard let connection else { return true }
        guard let ready = try? connection.wait(readable: true, writable: false, timeout: .zero) else { return true }
        return ready.readable
    }
}

@available(*, unavailable)
extension TeltonikaSession: Sendable {}

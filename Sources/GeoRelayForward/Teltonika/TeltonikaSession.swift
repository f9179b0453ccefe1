import CCurl
import GeoRelayCore

/// One connection to Traccar's Teltonika port, identified as one device (or as the probe), for a
/// one-off exchange on a thread of its own (the probe, `georelay send`): the blocking I/O around
/// a `TeltonikaExchange`, which says what to write and what the answers mean. The engine's
/// rounds drive their exchanges themselves (`TeltonikaRound`).
///
/// Traccar binds a connection to the devices identified on it and attributes a data frame
/// to any of them, so a session never carries more than one id.
///
/// `nextEvent(before:abort:)` waits on the connection and returns its events one at a time.
/// `CurlConnection` does DNS, TCP and, for `tls://`, the handshake and certificate checks.
///
/// Not `Sendable`: confine it to one thread.
final class TeltonikaSession {
    typealias Event = TeltonikaExchange.Event
    typealias Break = TeltonikaExchange.Break

    /// Where the port is and how to reach it.
    struct Endpoint: Sendable {
        /// What `CurlConnection` connects to: `telnet://` (plain TCP, no handshake of its own)
        /// for `tcp://`, `https://` (curl's TLS handshake and certificate checks) for `tls://`.
        var curlURL: String
        var tls: Configuration.TLSSettings
        var connectTimeoutSeconds: Double
        /// Where the connections' bytes are billed (the destination's meter).
        var meter: WireMeter?
        /// What the request timeout and the deadlines are kept on.
        var clock: any RelayClock

        /// The port Traccar's Teltonika decoder listens on by default.
        static let defaultPort = 5027

        init(
            settings: Configuration.DestinationSettings, meter: WireMeter? = nil, clock: any RelayClock = SystemClock()
        ) throws(CurlError) {
            curlURL = try Self.curlURL(settings.url)
            tls = settings.tls
            connectTimeoutSeconds = settings.connectTimeoutSeconds
            self.meter = meter
            self.clock = clock
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

    private let endpoint: Endpoint
    private(set) var connection: CurlConnection?
    /// The protocol on the current connection (a fresh one for each connection).
    private var exchange: TeltonikaExchange
    /// Wire bytes already handed to `takeWireBytes()` from the current connection.
    private var countedBytes = 0
    /// Wire bytes of connections already closed, not yet handed out.
    private var closedBytes = 0
    /// Events of the last read that `nextEvent` has not returned yet: one read can carry several
    /// answers (the id's `0x01` and the count of the frame it let go), and it returns one at a time.
    private var unreported: [Event] = []

    /// - Throws: `TeltonikaCodecError` when `uniqueID` cannot identify on the port (not ASCII, empty).
    init(uniqueID: String, endpoint: Endpoint) throws(TeltonikaCodecError) {
        exchange = TeltonikaExchange(identification: try TeltonikaCodec.identification(uniqueID: uniqueID))
        self.endpoint = endpoint
    }

    var hasOutput: Bool { exchange.hasOutput }

    /// Connects (blocking for at most the connect timeout), unless connected already.
    func connect() throws(CurlError) {
        guard connection == nil else { return }
        let connection = try CurlConnection(
            url: endpoint.curlURL, tls: endpoint.tls, connectTimeoutSeconds: endpoint.connectTimeoutSeconds,
            meter: endpoint.meter, clock: endpoint.clock)
        try connection.connect()
        self.connection = connection
        countedBytes = 0
    }

    /// Queues a data frame (identifying first on a fresh connection) and sends what the socket takes.
    /// - Precondition: connected; and nothing awaited, or the id answered `0x01` (frames behind
    ///   frames, never behind an identification whose answer may drop them).
    func send(frame: [UInt8]) -> Event? {
        precondition(connection != nil, "TeltonikaSession.send with no connection")
        exchange.queue(frame: frame)
        return flush()
    }

    /// Queues the identification alone (the probe), and sends it.
    func identify() -> Event? {
        precondition(connection != nil, "TeltonikaSession.identify with no connection")
        exchange.queueIdentification()
        return flush()
    }

    /// Sends what the socket takes of the queued bytes.
    func flush() -> Event? {
        guard let connection, exchange.hasOutput else { return nil }
        do throws(CurlError) {
            while exchange.hasOutput {
                let taken = try connection.send(exchange.output, from: exchange.sentBytes)
                if taken == 0 { break }
                exchange.wrote(taken)
            }
            return nil
        } catch {
            return fail(exchange.failed(error.message))
        }
    }

    /// Reads what arrived (until the socket would block: over TLS curl may hold decrypted bytes)
    /// and returns the answers in it, in order; a `.broken` event is always the last.
    func receive(into scratch: UnsafeMutableRawBufferPointer) -> [Event] {
        guard let connection else { return [] }
        var events: [Event] = []
        do throws(CurlError) {
            while let count = try connection.receive(into: scratch) {
                if count == 0 { return events + [fail(exchange.peerClosed())] }
                events += exchange.received(UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                if case .broken(let reason) = events.last {
                    events[events.count - 1] = fail(reason)
                    return events
                }
            }
        } catch {
            return events + [fail(exchange.failed(error.message))]
        }
        // The id's `0x01` lets the frame that waited for it go.
        if let broken = flush() { events.append(broken) }
        return events
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
        exchange = TeltonikaExchange(identification: exchange.identification)
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
    func nextEvent(before deadline: RelayInstant, abort: AbortFlag? = nil) -> Event? {
        if !unreported.isEmpty { return unreported.removeFirst() }
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 1)
        defer { scratch.deallocate() }
        let clock = endpoint.clock
        while abort?.isSet != true, clock.now() < deadline, let connection {
            let slice = min(clock.now().duration(to: deadline), .milliseconds(250))
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
}

@available(*, unavailable)
extension TeltonikaSession: Sendable {}

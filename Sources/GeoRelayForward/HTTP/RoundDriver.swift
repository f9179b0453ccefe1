import GeoRelayCore
import GeoRelaySpool
import Glibc

/// What a connection did, told to a round's state machine by its driver.
enum ConnectionEvent<ID: Hashable> {
    /// The top of the driver's loop: start what may start. `yield` set, nothing new starts.
    case turn(yield: Bool)
    /// A kept connection checked before reuse: still good, or closed by the server meanwhile.
    case verified(ID, fresh: Bool)
    /// The connection `open` asked for is open, or could not be opened.
    case opened(ID)
    case openFailed(ID, String)
    /// The socket took `count` more of the connection's output.
    case wrote(ID, count: Int)
    /// Bytes read from the connection (valid only during the call).
    case received(ID, UnsafeRawBufferPointer)
    /// The server closed the connection (a read of 0 bytes).
    case peerClosed(ID)
    /// A read or write failed: the connection is finished.
    case failed(ID, String)
    /// Time passed: what owes an answer for the request timeout is broken.
    case tick
    /// The forwarder stops: nothing new goes; what is on the wire is abandoned at `finish`.
    case stop
    /// Devices' newest positions, committed since the round began (`LiveJoin`): live fixes to send
    /// ahead of the rest of the round. A round that cannot take them ignores them.
    case joined([StoredPosition])
}

/// What a round's state machine asks its driver to do.
enum ConnectionAction<ID: Hashable> {
    /// Open a connection, then say `opened` or `openFailed`.
    case open(ID)
    /// Check a kept connection (`verified`).
    case verify(ID)
    /// Write the connection's output from where the socket stopped (`output(of:)`), saying `wrote`.
    case send(ID)
    /// Drop the connection.
    case close(ID)
    /// Hand what was settled to the spool (and the uplink monitor).
    case progress(DeliveryUpdate)
}

/// A round of deliveries as a state machine without I/O (`OsmAndRound`,
/// `TeltonikaRound`): `RoundDriver` tells it what happened and does what it asks.
protocol ConnectionRound {
    associatedtype ID: Hashable
    mutating func handle(
        _ event: ConnectionEvent<ID>, at now: RelayInstant, ledger: inout DeliveryLedger
    ) -> [ConnectionAction<ID>]
    /// Ends the round (after `stop`, abandoning what is in flight) and hands over the last progress.
    mutating func finish() -> [ConnectionAction<ID>]
    /// The connection's bytes for the socket, and how many of them it has taken.
    func output(of id: ID) -> (bytes: [UInt8], sent: Int)?
    /// The connections to poll, and whether each has bytes to write.
    var polled: [(id: ID, writing: Bool)] { get }
    /// When the oldest silence owing an answer reaches the request timeout.
    var deadline: RelayInstant? { get }
    /// Nothing left to do after the last `turn` and what it asked for: read once the driver has
    /// done the turn's actions (a connection it asked for may be what carries the next request).
    var isFinished: Bool { get }
    /// Waiting for something only the caller can give (`PushRound.need`): `run` returns, leaving
    /// the round and its connections as they are, and is called again once it has it.
    var waitsForCaller: Bool { get }
}

extension ConnectionRound {
    var waitsForCaller: Bool { false }
}

/// The one I/O loop under every engine's rounds: it owns the connections (libcurl's, which do
/// DNS, TCP, TLS and certificate checks), polls them with the engine's wake pipe, moves bytes
/// and feeds the round its events, on the engine's thread.
final class RoundDriver<ID: Hashable> {
    private let url: String
    private let tls: Configuration.TLSSettings
    private let connectTimeoutSeconds: Double
    private let meter: WireMeter?
    private let wakeup: WakePipe
    /// What the round's events are timed on (`handle(_:at:)`) and its deadline kept on.
    let clock: any RelayClock
    /// Open connections, kept between rounds.
    private var connections: [ID: CurlConnection] = [:]
    /// A connection the link's return check opened, taken by the next `open` (`SpareConnection`).
    private let spare: SpareConnection?

    init(
        url: String, tls: Configuration.TLSSettings, connectTimeoutSeconds: Double, meter: WireMeter?,
        spare: SpareConnection? = nil, clock: any RelayClock
    ) throws {
        self.url = url
        self.spare = spare
        self.tls = tls
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.meter = meter
        self.clock = clock
        wakeup = try WakePipe()
    }

    /// A driver for `settings`' destination.
    convenience init(
        for settings: Configuration.DestinationSettings, meter: WireMeter?, spare: SpareConnection?,
        clock: any RelayClock
    ) throws {
        try self.init(
            url: settings.url, tls: settings.tls, connectTimeoutSeconds: settings.connectTimeoutSeconds, meter: meter,
            spare: spare, clock: clock)
    }

    /// Wakes a running round so it sees its flags; may be called from any thread.
    var wake: @Sendable () -> Void { wakeup.signal }

    func closeAll() {
        connections.removeAll()
        spare?.drop()
    }

    /// Drops the kept connections the server closed meanwhile (or that hold bytes nobody asked
    /// for) and returns the ids of those still open.
    func keptOpen() -> Set<ID> {
        for (id, connection) in connections where !isFresh(connection) { connections[id] = nil }
        return Set(connections.keys)
    }

    private func isFresh(_ connection: CurlConnection) -> Bool {
        (try? connection.wait(readable: true, writable: false, timeout: .zero)).map { !$0.readable } ?? false
    }

    /// Runs `round` to its end, or until `stop` is set, or until it waits for its caller.
    /// - Returns: false when the round waits for its caller (`waitsForCaller`): it is not finished.
    @discardableResult
    func run<Round: ConnectionRound>(
        _ round: inout Round, ledger: inout DeliveryLedger, stop: AbortFlag, yield: AbortFlag?, live: LiveJoin? = nil,
        logger: Logger, progress: (DeliveryUpdate) -> Void
    ) -> Bool where Round.ID == ID {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { scratch.deallocate() }

        func tell(_ event: ConnectionEvent<ID>) {
            perform(round.handle(event, at: clock.now(), ledger: &ledger))
        }

        /// Does what the round asks, feeding back what came of it.
        func perform(_ actions: [ConnectionAction<ID>]) {
            for action in actions {
                switch action {
                case .open(let id):
                    if let kept = spare?.take(now: clock.now()) {
                        connections[id] = kept
                        tell(.opened(id))
                        continue
                    }
                    do throws(CurlError) {
                        let connection = try CurlConnection(
                            url: url, tls: tls, connectTimeoutSeconds: connectTimeoutSeconds, meter: meter,
                            clock: clock)
                        try connection.connect()
                        connections[id] = connection
                        tell(.opened(id))
                    } catch {
                        tell(.openFailed(id, error.message))
                    }
                case .verify(let id):
                    let fresh = connections[id].map(isFresh) ?? false
                    if !fresh { connections[id] = nil }
                    tell(.verified(id, fresh: fresh))
                case .send(let id):
                    send(id)
                case .close(let id):
                    connections[id] = nil
                case .progress(let update):
                    progress(update)
                }
            }
        }

        func send(_ id: ID) {
            guard let connection = connections[id] else { return }
            do throws(CurlError) {
                while let output = round.output(of: id), output.sent < output.bytes.count {
                    // Offered again from the first byte not taken, no shorter (see `CurlConnection`).
                    let taken = try connection.send(output.bytes, from: output.sent)
                    if taken == 0 { break }
                    tell(.wrote(id, count: taken))
                }
            } catch {
                tell(.failed(id, error.message))
            }
        }

        /// Reads what arrived; over TLS curl may hold decrypted bytes, so until it would block.
        func receive(_ id: ID) {
            do throws(CurlError) {
                while let connection = connections[id], let count = try connection.receive(into: scratch) {
                    if count == 0 { return tell(.peerClosed(id)) }
                    tell(.received(id, UnsafeRawBufferPointer(rebasing: scratch[..<count])))
                }
            } catch {
                tell(.failed(id, error.message))
            }
        }

        var descriptors: [pollfd] = []
        while !stop.isSet {
            if let joined = live?.take(), !joined.isEmpty { tell(.joined(joined)) }
            tell(.turn(yield: yield?.isSet == true))
            if round.isFinished { break }
            if round.waitsForCaller { return false }
            let polled = round.polled.compactMap { entry in
                connections[entry.id].map { (entry.id, $0.descriptor, entry.writing) }
            }
            descriptors.removeAll(keepingCapacity: true)
            descriptors.append(pollfd(fd: wakeup.readEnd, events: Int16(POLLIN), revents: 0))
            for (_, descriptor, writing) in polled {
                descriptors.append(
                    pollfd(fd: descriptor, events: Int16(POLLIN) | (writing ? Int16(POLLOUT) : 0), revents: 0))
            }
            let deadline = round.deadline
            // Computed in the call, so a poll interrupted by a signal waits only for what is left.
            // Clamped as a Double first: the conversion traps on a value out of Int32's range.
            var waitMs: Int32 {
                let ms = deadline.map { clock.now().duration(to: $0) / .milliseconds(1) + 1 } ?? 1000
                return Int32(min(1000, max(0, ms.isFinite ? ms : 1000)))
            }
            do throws(SystemError) {
                try syscall("poll") { poll(&descriptors, nfds_t(descriptors.count), waitMs) }
            } catch {
                logger.error("\(error)")
                break
            }
            if descriptors[0].revents != 0 { wakeup.drain() }
            for (offset, (id, _, _)) in polled.enumerated() where descriptors[offset + 1].revents != 0 {
                if descriptors[offset + 1].revents & Int16(POLLOUT) != 0 { send(id) }
                receive(id)
            }
            tell(.tick)
        }
        if stop.isSet { tell(.stop) }
        perform(round.finish())
        return true
    }
}

@available(*, unavailable)
extension RoundDriver: Sendable {}

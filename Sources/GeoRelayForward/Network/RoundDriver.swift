import GeoRelayCore
import GeoRelaySpool

/// What a connection did, told to a round's state machine by its driver.
enum ConnectionEvent<ID: Hashable> {
    /// The top of the driver's loop: start what may start. `yield` set, nothing new starts.
    case turn(yield: Bool)
    /// A kept connection checked before reuse: still good, or closed by the server meanwhile.
    case verified(ID, fresh: Bool)
    /// The connection `open` asked for is open, or could not be opened (its handshake went on
    /// while the driver moved the others' bytes).
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
    /// Begin a connection, then say `opened` or `openFailed` once its handshake is done: several
    /// may be under way at once.
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

/// The one I/O loop under every engine's rounds: it owns the connections (`RoundNetwork`'s:
/// libcurl's in the daemon, a simulated link's in tests), waits on them, moves bytes and feeds
/// the round its events, on the engine's thread.
final class RoundDriver<ID: Hashable> {
    private let network: any RoundNetwork
    /// What the round's events are timed on (`handle(_:at:)`) and its deadline kept on.
    let clock: any RelayClock
    /// Open connections, kept between rounds, and those whose handshake is under way.
    private var connections: [ID: any RoundConnection] = [:]
    /// In the order the round asked for them: a set's order changes from process to process, and
    /// the handshakes' order is the order of the round's next events, so a simulated run would
    /// not replay from its seed.
    private var connecting: [ID] = []

    init(network: any RoundNetwork, clock: any RelayClock) {
        self.network = network
        self.clock = clock
    }

    /// A driver for `settings`' destination: over `network`, or libcurl's to its URL.
    convenience init(
        for settings: Configuration.DestinationSettings, meter: WireMeter?, spare: SpareConnection?,
        network: (any RoundNetwork)? = nil, clock: any RelayClock
    ) throws {
        try self.init(
            network: network
                ?? CurlNetwork(
                    url: settings.url, tls: settings.tls, connectTimeoutSeconds: settings.connectTimeoutSeconds,
                    meter: meter, spare: spare, clock: clock),
            clock: clock)
    }

    /// Wakes a running round so it sees its flags; may be called from any thread.
    var wake: @Sendable () -> Void { network.wake }

    func closeAll() {
        connections.removeAll()
        connecting.removeAll()
        network.dropKept()
    }

    /// Drops the kept connections the server closed meanwhile (or that hold bytes nobody asked
    /// for) and returns the ids of those still open.
    func keptOpen() -> Set<ID> {
        for (id, connection) in connections where !connection.isQuiet { connections[id] = nil }
        return Set(connections.keys)
    }

    /// Runs `round` to its end, or until `stop` is set, or until it waits for its caller.
    /// - Returns: false when the round waits for its caller (`waitsForCaller`): it is not finished.
    @discardableResult
    func run<Round: ConnectionRound>(
        _ round: inout Round, ledger: inout DeliveryLedger, stop: AbortFlag, yield: AbortFlag?, live: LiveJoin? = nil,
        progress: (DeliveryUpdate) -> Void
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
                    do throws(ConnectionFailure) {
                        connections[id] = try network.connect()
                        if !connecting.contains(id) { connecting.append(id) }
                        settle(id)
                    } catch {
                        tell(.openFailed(id, error.message))
                    }
                case .verify(let id):
                    let fresh = connections[id]?.isQuiet ?? false
                    if !fresh { connections[id] = nil }
                    tell(.verified(id, fresh: fresh))
                case .send(let id):
                    send(id)
                case .close(let id):
                    connections[id] = nil
                    connecting.removeAll { $0 == id }
                case .progress(let update):
                    progress(update)
                }
            }
        }

        /// Tells the round of a handshake that ended.
        func settle(_ id: ID) {
            guard connecting.contains(id), let connection = connections[id] else { return }
            switch connection.progress {
            case .connecting:
                return
            case .open:
                connecting.removeAll { $0 == id }
                tell(.opened(id))
            case .failed(let message):
                connecting.removeAll { $0 == id }
                connections[id] = nil
                tell(.openFailed(id, message))
            }
        }

        func send(_ id: ID) {
            guard let connection = connections[id] else { return }
            do throws(ConnectionFailure) {
                while let output = round.output(of: id), output.sent < output.bytes.count {
                    // Offered again from the first byte not taken, no shorter (`RoundConnection`).
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
            do throws(ConnectionFailure) {
                while let connection = connections[id], let count = try connection.receive(into: scratch) {
                    if count == 0 { return tell(.peerClosed(id)) }
                    tell(.received(id, UnsafeRawBufferPointer(rebasing: scratch[..<count])))
                }
            } catch {
                tell(.failed(id, error.message))
            }
        }

        while !stop.isSet {
            if let joined = live?.take(), !joined.isEmpty { tell(.joined(joined)) }
            tell(.turn(yield: yield?.isSet == true))
            if round.isFinished { break }
            if round.waitsForCaller { return false }
            var polled = round.polled.compactMap { entry in
                connections[entry.id].map { (id: entry.id, connection: $0, writing: entry.writing) }
            }
            for id in connecting { if let connection = connections[id] { polled.append((id, connection, true)) } }
            let ready = network.wait(polled.map { ($0.connection, $0.writing) }, until: round.deadline)
            for readiness in ready {
                let id = polled[readiness.index].id
                if connecting.contains(id) {
                    settle(id)
                    continue
                }
                if readiness.writable { send(id) }
                receive(id)
            }
            // A handshake may end with nothing to poll (a thread of the network's finished it).
            for id in connecting { settle(id) }
            tell(.tick)
        }
        if stop.isSet { tell(.stop) }
        perform(round.finish())
        // A handshake the round no longer waits for is not a connection to keep.
        for id in connecting { connections[id] = nil }
        connecting.removeAll()
        return true
    }
}

@available(*, unavailable)
extension RoundDriver: Sendable {}

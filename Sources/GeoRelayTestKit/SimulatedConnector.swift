import Foundation
import GeoRelayCore
import GeoRelayForward

/// A round driver's network (`RoundNetwork`) over a `SimulatedNetwork` to one server: opening a
/// connection costs the link's round trip, or what the terminal does while its satellite is
/// down; a wait moves the simulated clock to the next thing that happens on the link, at most a
/// second ahead (the driver's tick) or to the round's deadline.
package final class SimulatedConnector: RoundNetwork, @unchecked Sendable {
    package let network: SimulatedNetwork
    package let server: SimulatedServer
    private let connectTimeout: Duration

    /// Which driver this is, for its wakes.
    private let id: Int
    /// The destination's driver this is, or whose checks' way it is.
    private let family: Int

    /// - Parameter checksOf: the destination (its driver's id) whose checks' way this is
    ///   (`sibling`): its threads park as checks.
    init(network: SimulatedNetwork, server: SimulatedServer, connectTimeout: Duration, checksOf family: Int? = nil) {
        self.network = network
        self.server = server
        self.connectTimeout = connectTimeout
        id = family != nil ? -network.newConnector() : network.newConnector()
        self.family = family ?? id
        if let family { network.register(check: id, family: family) }
    }

    package var wake: @Sendable () -> Void { { [network, id] in network.wake(id) } }

    /// Whether its driver is parked on the clock with nothing ready: it waits only for time.
    package var isParked: Bool { network.isParked(id) }

    /// Whether its destination waits on checks of its own, each parked on the clock (a login).
    package var checksParked: Bool { network.checksParked(family: family) }

    /// Whether the server listens: stopped, it refuses new connections (its open ones go on
    /// until `closeServerConnections`).
    package var listening: Bool {
        get { server.listening }
        set { server.listening = newValue }
    }

    /// The server closes every connection it holds, cleanly (a restart, an idle timeout).
    package func closeServerConnections() {
        network.locked { state in
            let now = network.clock.now()
            for (id, connection) in state.connections where connection.server === server && !connection.serverClosed {
                state.events.push(LinkEvent(at: now, kind: .serverCloses(id, lingering: true, reset: false)))
            }
        }
    }

    package func open() throws(ConnectionFailure) -> any RoundConnection {
        let clock = network.clock
        let started = clock.now()
        let deadline = started + connectTimeout
        var attempt = started
        var backoff = Duration.seconds(1)
        while true {
            let outcome: Opening = network.locked { state in
                state.counters.opened += 1
                return opening(&state)
            }
            switch outcome {
            case .open(let connection):
                return SimulatedConnection(network: network, id: connection)
            case .across(let connection):
                // The handshake's round trip: the server has it after one way, the client after both.
                network.run(until: clock.now() + network.link.roundTrip, as: id) { _ in false }
                return SimulatedConnection(network: network, id: connection)
            case .refused(let after):
                network.run(until: clock.now() + after, as: id) { _ in false }
                throw ConnectionFailure("Failed to connect: Connection refused")
            case .unanswered:
                // SYN lost: tried again after 1, 2, 4… seconds, as the kernel does, until the timeout.
                attempt = attempt + backoff
                backoff = backoff * 2
                if attempt >= deadline {
                    network.run(until: deadline, as: id) { _ in false }
                    throw ConnectionFailure(
                        "Failed to connect: Connection timed out after \(connectTimeout / .milliseconds(1)) ms")
                }
                network.run(until: attempt, as: id) { _ in false }
                network.locked { $0.counters.opened -= 1 }
            }
        }
    }

    private enum Opening {
        case open(Int)
        case across(Int)
        case refused(after: Duration)
        case unanswered
    }

    private func opening(_ state: inout SimulatedNetwork.State) -> Opening {
        let now = network.clock.now()
        func connection(_ configure: (inout LinkConnection) -> Void = { _ in }) -> Int {
            state.nextConnection += 1
            var connection = LinkConnection(server: server)
            configure(&connection)
            state.connections[state.nextConnection] = connection
            return state.nextConnection
        }
        switch state.down {
        case .refuse?:
            state.counters.refused += 1
            return .refused(after: .zero)
        case .close?:
            // The terminal's accelerator answered the handshake on board, and closes with nothing said.
            return .open(connection { $0.peerClosed = true })
        case .hold?:
            return .open(connection { $0.heldOpen = true })
        case .drop?:
            return .unanswered
        case nil:
            guard server.listening else {
                state.counters.refused += 1
                return .refused(after: network.link.roundTrip)
            }
            let id = connection()
            state.events.push(LinkEvent(at: now + network.link.oneWay, kind: .accept(id)))
            return .across(id)
        }
    }

    package func wait(_ polled: [(connection: any RoundConnection, writing: Bool)], until deadline: RelayInstant?)
        -> [ConnectionReadiness]
    {
        let asked = polled.map { (($0.connection as? SimulatedConnection)?.id ?? 0, $0.writing) }
        let now = network.clock.now()
        // As the kernel's poll: a deadline is waited for past it (rounded up to the next
        // millisecond), so the round that set it finds it reached; at most a second.
        let limit = min(max(deadline ?? now + .seconds(1), now) + .milliseconds(1), now + .seconds(1))
        network.run(until: limit, as: id) { [id] state in
            state.woken.contains(id) || !Self.ready(asked, state: state, now: network.clock.now()).isEmpty
        }
        return network.locked { [id] state in
            state.woken.remove(id)
            return Self.ready(asked, state: state, now: network.clock.now())
        }
    }

    private static func ready(_ asked: [(Int, Bool)], state: SimulatedNetwork.State, now: RelayInstant)
        -> [ConnectionReadiness]
    {
        asked.enumerated().compactMap { index, entry in
            guard let connection = state.connections[entry.0] else { return nil }
            let writable = entry.1 && (connection.failure != nil || connection.room(at: now) > 0)
            let readable = !connection.inbox.isEmpty || connection.peerClosed || connection.failure != nil
            return readable || writable ? ConnectionReadiness(index: index, writable: writable) : nil
        }
    }
}

/// A connection's client end on the simulated network.
final class SimulatedConnection: RoundConnection, @unchecked Sendable {
    let network: SimulatedNetwork
    let id: Int

    init(network: SimulatedNetwork, id: Int) {
        self.network = network
        self.id = id
    }

    deinit {
        network.locked { $0.connections[id]?.clientClosed = true }
    }

    func send(_ bytes: [UInt8], from offset: Int) throws(ConnectionFailure) -> Int {
        let result: Result<Int, ConnectionFailure> = network.locked { state in
            guard var connection = state.connections[id] else { return .failure(ConnectionFailure("closed")) }
            if let failure = connection.failure { return .failure(ConnectionFailure(failure)) }
            let now = network.clock.now()
            connection.unsent.removeAll { $0.leaves <= now }
            let taken = min(bytes.count - offset, connection.room(at: now))
            guard taken > 0 else { return .success(0) }
            let chunk = Array(bytes[offset..<(offset + taken)])
            if state.isBroken {
                state.counters.bytesUpWhileDown += taken
                let (probes, payloads) = FaultProxy.probesAndPayloads(in: chunk)
                state.counters.probesWhileDown += probes
                state.counters.payloadsWhileDown += payloads
            }
            if connection.heldOpen {
                connection.heldOutput += chunk
                connection.unsent.append((now, taken))
            } else if connection.silenced || connection.peerClosed && connection.session == nil {
                // Into the void: a silent link, or a terminal that closed on board.
                connection.unsent.append((now, taken))
            } else {
                let leaves = network.serialise(up: true, id: id, bytes: chunk, from: now, state: &state)
                connection.unsent.append((leaves, taken))
            }
            state.connections[id] = connection
            return .success(taken)
        }
        return try result.get()
    }

    func receive(into buffer: UnsafeMutableRawBufferPointer) throws(ConnectionFailure) -> Int? {
        let result: Result<Int?, ConnectionFailure> = network.locked { state in
            guard var connection = state.connections[id] else { return .failure(ConnectionFailure("closed")) }
            if !connection.inbox.isEmpty {
                let count = min(buffer.count, connection.inbox.count)
                connection.inbox.withUnsafeBytes {
                    buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[..<count]))
                }
                connection.inbox.removeFirst(count)
                state.connections[id] = connection
                return .success(count)
            }
            if let failure = connection.failure { return .failure(ConnectionFailure(failure)) }
            return .success(connection.peerClosed ? 0 : nil)
        }
        return try result.get()
    }

    var isQuiet: Bool {
        network.locked { state in
            state.connections[id].map { $0.failure == nil && !$0.peerClosed && $0.inbox.isEmpty } ?? false
        }
    }
}

/// A connection as the link carries it.
struct LinkConnection {
    let server: SimulatedServer
    var session: (any SimulatedSession)?
    /// Arrived and not read by the client.
    var inbox: [UInt8] = []
    var peerClosed = false
    /// Set: every call fails with it (a reset).
    var failure: String?
    /// Bytes written, each write with when its last byte leaves the sending end.
    var unsent: [(leaves: RelayInstant, count: Int)] = []
    /// Accepted on board by a `hold` terminal, not yet across the link; what it was sent meanwhile.
    var heldOpen = false
    var heldOutput: [UInt8] = []
    /// A `drop` terminal's: nothing crosses either way, ever again.
    var silenced = false
    var serverClosed = false
    var lingering = false
    var clientClosed = false
    var lastReplyAt = RelayInstant.origin

    init(server: SimulatedServer) {
        self.server = server
    }

    var isFinished: Bool { failure != nil || clientClosed }

    /// What the send buffer takes now.
    func room(at now: RelayInstant) -> Int {
        max(0, SimulatedNetwork.sendBuffer - unsent.lazy.filter { $0.leaves > now }.reduce(0) { $0 + $1.count })
    }
}

/// Something that happens on the link at an instant.
struct LinkEvent {
    var at: RelayInstant
    var kind: Kind

    enum Kind {
        /// The handshake reached the server.
        case accept(Int)
        case toServer(Int, [UInt8])
        /// The server's answer leaves it (after its processing time).
        case serverSends(Int, [UInt8])
        case serverCloses(Int, lingering: Bool, reset: Bool)
        case toClient(Int, [UInt8])
        case finToClient(Int)
        case resetToClient(Int)
    }

    /// Arriving at one end from the other (what a satellite that is down holds or loses), not
    /// something a server does on its own side.
    var crossesTheLink: Bool {
        switch kind {
        case .serverSends, .serverCloses: false
        default: true
        }
    }

    func retimed(_ instant: RelayInstant) -> LinkEvent { LinkEvent(at: instant, kind: kind) }
}

/// Events in time order, those at the same instant in the order they were pushed.
struct EventQueue {
    private var events: [(event: LinkEvent, order: Int)] = []
    private var pushed = 0

    var first: LinkEvent? { events.first?.event }

    mutating func push(_ event: LinkEvent) {
        pushed += 1
        // After every event at or before its instant: binary search for the first one later.
        var low = 0
        var high = events.count
        while low < high {
            let middle = (low + high) / 2
            if events[middle].event.at <= event.at { low = middle + 1 } else { high = middle }
        }
        events.insert((event, pushed), at: low)
    }

    mutating func popDue(_ now: RelayInstant) -> LinkEvent? {
        guard let first = events.first, first.event.at <= now else { return nil }
        return events.removeFirst().event
    }
}

extension SimulatedConnector {
    /// Another way onto the link to the same server, for a destination's checks (probes, bare
    /// attempts) beside its rounds: they must not take the rounds' wakes.
    package func sibling() -> SimulatedConnector {
        SimulatedConnector(network: network, server: server, connectTimeout: connectTimeout, checksOf: family)
    }

    /// The destination's probe over this path (a GET of `url`), on a thread of its own.
    package func probe(url: String) -> DestinationLink.Probe {
        let checks = sibling()
        return { [network, family] timeout in
            await network.check(family: family) {
                NetworkChecks.probe(over: checks, url: url, timeout: timeout, clock: network.clock)
            }
                ?? (.nothing, 0)
        }
    }

    /// The Teltonika port's probe over this path (an identification), on a thread of its own.
    package var teltonikaProbe: DestinationLink.Probe {
        let checks = sibling()
        return { [network, family] timeout in
            await network.check(family: family) {
                NetworkChecks.teltonikaProbe(over: checks, timeout: timeout, clock: network.clock)
            }
                ?? (.nothing, 0)
        }
    }

    /// The push destination's token and login requests over this path, each on a connection and a
    /// thread of its own, within the request's timeout.
    package var authTransport: NetworkAuthTransport {
        let checks = sibling()
        return NetworkAuthTransport { [network, family] request in
            let timeout = Duration.milliseconds(CheckedNumbers.milliseconds(seconds: request.timeoutSeconds) ?? 30_000)
            return await network.check(family: family) {
                NetworkChecks.exchange(request, over: checks, timeout: timeout, clock: network.clock).result
            } ?? .failure(NetworkAuthTransport.abandoned)
        }
    }

    /// The destination's bare connection attempt over this path, on a thread of its own.
    package var connectAttempt: DestinationLink.ConnectAttempt {
        let checks = sibling()
        return { [network, family] in
            await network.check(family: family) { NetworkChecks.connect(over: checks, clock: network.clock) } ?? .failed
        }
    }
}

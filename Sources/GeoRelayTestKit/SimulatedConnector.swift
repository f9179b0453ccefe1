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
    /// Whether `connect` lets handshakes run beside the driver (`SimulatedNetwork.connector`).
    private let concurrentHandshakes: Bool

    init(
        network: SimulatedNetwork, server: SimulatedServer, connectTimeout: Duration, checksOf family: Int? = nil,
        concurrentHandshakes: Bool = false
    ) {
        self.network = network
        self.server = server
        self.connectTimeout = connectTimeout
        self.concurrentHandshakes = concurrentHandshakes
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

    /// Begins a connection as `open` makes one, without waiting for its handshake: it ends on
    /// the link's time (`LinkEvent.Kind.handshake`), and a SYN the link loses is tried again after
    /// 1, 2, 4… seconds until the connect timeout, as the kernel does.
    package func connect() throws(ConnectionFailure) -> any RoundConnection {
        guard concurrentHandshakes else { return try open() }
        let begun: Result<Int, ConnectionFailure> = network.locked { state in
            state.counters.opened += 1
            let now = network.clock.now()
            switch opening(&state) {
            case .open(let id):
                return .success(id)
            case .across(let id):
                state.connections[id]?.handshaking = true
                state.events.push(LinkEvent(at: now + network.link.roundTrip, kind: .handshake(id, .done)))
                return .success(id)
            case .refused(let after):
                guard after > .zero else { return .failure(ConnectionFailure("Failed to connect: Connection refused")) }
                let id = Self.handshaking(server, &state)
                state.events.push(
                    LinkEvent(at: now + after, kind: .handshake(id, .failed("Failed to connect: Connection refused"))))
                return .success(id)
            case .unanswered:
                let id = Self.handshaking(server, &state)
                state.connections[id]?.retries = LinkConnection.Retries(
                    next: now + .seconds(1), backoff: .seconds(2), deadline: now + connectTimeout,
                    timeout: connectTimeout)
                state.events.push(LinkEvent(at: now + .seconds(1), kind: .handshake(id, .retry)))
                return .success(id)
            }
        }
        let id = try begun.get()
        return SimulatedConnection(network: network, id: id)
    }

    private static func handshaking(_ server: SimulatedServer, _ state: inout SimulatedNetwork.State) -> Int {
        state.nextConnection += 1
        var connection = LinkConnection(server: server)
        connection.handshaking = true
        state.connections[state.nextConnection] = connection
        return state.nextConnection
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
            guard let connection = state.connections[entry.0], !connection.handshaking else { return nil }
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
            state.connections[id].map { !$0.handshaking && $0.failure == nil && !$0.peerClosed && $0.inbox.isEmpty }
                ?? false
        }
    }

    var progress: ConnectProgress {
        network.locked { state in
            guard let connection = state.connections[id] else { return .failed("closed") }
            if connection.handshaking { return .connecting }
            if connection.neverOpened, let failure = connection.failure { return .failed(failure) }
            return .open
        }
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

import Foundation
import GeoRelayCore
import GeoRelayForward

/// One link on simulated time, between the relay and its servers (`../shared/LINKS.md`): a
/// one-way delay, a bandwidth each way shared by every connection and given out a segment at a
/// time, servers that answer without a socket (`SimulatedService`), and a satellite that goes down
/// the way a kind of terminal shows it (`TerminalKind`).
///
/// The rounds reach it through a `SimulatedConnector` (their `RoundNetwork`): the same driver
/// and state machines as the daemon's, bytes and all, with no kernel under them. A driver's wait
/// moves the clock to the next thing that happens on the link (the clock is the network's alone
/// to move while a round runs), so a round over two hours of satellite time takes milliseconds and
/// the same seed replays it exactly.
///
/// TCP is modelled as far as a relay can tell it apart: a handshake costs a round trip; a
/// connection's unsent bytes are bounded by its send buffer; segments queue for the link's
/// bandwidth behind every other connection's and arrive in order; a close after the last answer is
/// a clean end, a close with requests unread, or bytes reaching a closed connection, is a reset. A
/// handshake with no answer is tried again after 1, 2, 4… seconds until the connect timeout.
package final class SimulatedNetwork: @unchecked Sendable {
    package let clock: SimulatedClock
    package let link: LinkProfile
    /// What a connection may have written and not yet serialised onto the link.
    package static let sendBuffer = 64 * 1024
    static let segment = 1448

    /// What crossed the link.
    package struct Counters: Sendable, Equatable {
        /// Handshakes the server answered (connections that reached it).
        package var connections = 0
        /// Connections the relay opened, whoever answered them (a terminal on board included).
        package var opened = 0
        package var refused = 0
        package var bytesUp = 0
        package var bytesDown = 0
        /// Relay → server bytes written while the satellite was down, or a fault held (`setFault`).
        package var bytesUpWhileDown = 0
        /// Of those, the probes (a GET naming no position, a Teltonika identification as the
        /// probe) and the HTTP requests carrying positions (`FaultProxy.probesAndPayloads`).
        package var probesWhileDown = 0
        package var payloadsWhileDown = 0
        package var resets = 0
    }

    /// The state below is the lock's: the driver's thread and the test's both reach it.
    let lock = NSLock()
    var state = State()

    struct State {
        var counters = Counters()
        var down: TerminalKind?
        var fault: ServerFault?
        /// What the relay writes now goes nowhere useful: counted as written while down.
        var isBroken: Bool { down != nil || fault != nil }
        var events = EventQueue()
        var connections: [Int: LinkConnection] = [:]
        var nextConnection = 0
        /// When each direction's serialiser is free again.
        var upFreeAt = RelayInstant.origin
        var downFreeAt = RelayInstant.origin
        /// Events held by a `hold` terminal while its satellite is down, carried on its return.
        var held: [LinkEvent] = []
        /// Connectors whose driver was woken (`RoundNetwork.wake`) and has not looked yet.
        var woken: Set<Int> = []
        var nextConnector = 0
    }

    /// Whether a driver's wait moves the clock itself (a round alone, in a test that drives it)
    /// or parks as one more sleeper on it until a test that runs a whole relay moves it
    /// (`SimulatedWorld`).
    package enum Time: Sendable {
        case drivenByWaits
        case movedByTest
    }

    package let time: Time
    /// Threads parked on the clock (world mode), by connector: what wakes them.
    private let parked = NSLock()
    private var parkedWaiters: [Int: (waiter: DispatchSemaphore, signalled: Bool)] = [:]
    /// The clock sleeper standing for the earliest event (world mode), so the test's moves stop there.
    private var eventAlarm: (at: RelayInstant, id: UInt64)?

    /// - Parameters:
    ///   - clock: moved by the network while a driver waits on it, or by the test (`time`).
    ///   - time: who moves the clock.
    package init(clock: SimulatedClock, link: LinkProfile = .lan, time: Time = .drivenByWaits) {
        self.clock = clock
        self.link = link
        self.time = time
    }

    /// A driver's way onto the link, to `service` (nil: nothing listens there).
    /// - Parameter concurrentHandshakes: `connect` lets handshakes run beside the driver, as the
    ///   daemon's network does for Teltonika's rounds; otherwise it opens as `open` does.
    package func connector(
        to service: (any SimulatedService)?, connectTimeout: Duration = .seconds(10), concurrentHandshakes: Bool = false
    ) -> SimulatedConnector {
        SimulatedConnector(
            network: self, server: SimulatedServer(service), connectTimeout: connectTimeout,
            concurrentHandshakes: concurrentHandshakes)
    }

    package var counters: Counters { locked { $0.counters } }

    /// The satellite goes down the way `kind` shows it (nil: it returns), now.
    package func setDown(_ kind: TerminalKind?) {
        locked { state in
            let now = clock.now()
            let was = state.down
            state.down = kind
            if let kind, was == nil {
                for id in state.connections.keys.sorted() where !state.connections[id]!.isFinished {
                    switch kind {
                    case .refuse, .close:
                        // The link takes its connections with it.
                        state.connections[id]!.failure = "Connection reset by peer"
                        state.counters.resets += 1
                    case .drop:
                        state.connections[id]!.silenced = true
                    case .hold:
                        break
                    }
                }
            } else if kind == nil, was == .hold {
                // Carried through: what the terminal held crosses now, in order.
                let held = state.held
                state.held.removeAll()
                for event in held { state.events.push(event.retimed(now + link.oneWay)) }
                for id in state.connections.keys.sorted() where state.connections[id]!.heldOpen {
                    state.connections[id]!.heldOpen = false
                    state.events.push(LinkEvent(at: now + link.oneWay, kind: .accept(id)))
                    let output = state.connections[id]!.heldOutput
                    state.connections[id]!.heldOutput.removeAll()
                    if !output.isEmpty { serialise(up: true, id: id, bytes: output, from: now, state: &state) }
                }
            }
        }
    }

    package var isDown: Bool { locked { $0.down != nil } }

    /// How the far end of the link mistreats connections, the satellite being up: a server, or a
    /// middlebox in front of it, as `FaultProxy`'s modes of the same names do on loopback.
    package enum ServerFault: Sendable {
        /// Takes the connection and every byte, and never answers: the relay's timeouts must fire.
        case blackHole
        /// Reads the request and closes without a byte of answer.
        case closeAfterRequest
        /// Reads part of the request, then resets.
        case resetMidRequest
        /// Hands the request to the server (which takes it), lets the answer's first 5 bytes
        /// through, then resets.
        case resetMidResponse
    }

    /// From now on the far end mistreats what reaches it (nil: it answers again). Connections
    /// already open meet it with their next bytes.
    package func setFault(_ fault: ServerFault?) {
        locked { $0.fault = fault }
    }

    /// Ends the wait of `connector`'s driver from another thread.
    func wake(_ connector: Int) {
        locked { _ = $0.woken.insert(connector) }
        signalParked(connector)
    }

    func newConnector() -> Int {
        locked { state in
            state.nextConnector += 1
            return state.nextConnector
        }
    }

    /// Whether `connector`'s driver is parked on the clock with nothing to look at: all it waits
    /// for is time (world mode).
    func isParked(_ connector: Int) -> Bool {
        parked.withLock { parkedWaiters[connector].map { !$0.signalled } ?? false }
    }

    /// Checks (probes, bare attempts, logins) under way on threads of their own, by the
    /// destination (its connector's family) they are for.
    private var checksUnderWay: [Int: Int] = [:]
    /// The family of each check connector (`SimulatedConnector.sibling`), by its key.
    private var families: [Int: Int] = [:]

    func register(check key: Int, family: Int) {
        parked.withLock { families[key] = family }
    }

    /// Runs a check of `family`'s destination (`body`, blocking) on a thread of its own: the world
    /// waits for it to park on the clock before moving it.
    /// The check is the wait of the destination's `WaitMark`, if it runs in one: until its task has
    /// taken the result, the count of checks under way keeps the world from moving.
    func check<T: Sendable>(family: Int, _ body: @escaping @Sendable () -> T) async -> T? {
        let mark = WaitMark.current
        parked.withLock {
            checksUnderWay[family, default: 0] += 1
            mark?.begin()
        }
        defer {
            parked.withLock {
                mark?.end()
                checksUnderWay[family, default: 1] -= 1
            }
        }
        return try? await offThePool(body)
    }

    /// Every check under way is parked on the clock, waiting only for time.
    var checksWait: Bool {
        parked.withLock { checksUnderWay.values.reduce(0, +) == parkedChecks(of: nil) }
    }

    /// Whether `family`'s destination has checks under way, every one parked on the clock: a round
    /// that waits for one (a login before its next batch) waits only for time.
    func checksParked(family: Int) -> Bool {
        parked.withLock {
            let underWay = checksUnderWay[family] ?? 0
            return underWay > 0 && underWay == parkedChecks(of: family)
        }
    }

    /// Check threads parked on the clock and not woken, of `family` (nil: of every destination);
    /// under `parked`'s lock.
    private func parkedChecks(of family: Int?) -> Int {
        parkedWaiters.count { $0.key < 0 && !$0.value.signalled && (family == nil || families[$0.key] == family) }
    }

    /// Wakes a parked thread (every one without `key`); until it parks again it is not idle.
    private func signalParked(_ key: Int? = nil) {
        parked.withLock {
            for (parkedKey, entry) in parkedWaiters where key == nil || parkedKey == key {
                parkedWaiters[parkedKey]?.signalled = true
                entry.waiter.signal()
            }
        }
    }

    /// The state, with what is due by now already handed to the link: a look between a driver's
    /// waits (a kept connection's check) sees what has happened by the clock's time.
    func locked<T>(_ body: (inout State) -> T) -> T {
        lock.lock()
        let delivered = deliverDue(&state)
        let result = body(&state)
        if time == .movedByTest { setEventAlarm() }
        lock.unlock()
        // Something happened: every parked driver looks again (and parks again if not for it).
        if delivered { signalParked() }
        return result
    }

    /// Keeps one sleeper on the clock at the earliest event, waking the parked drivers there.
    private func setEventAlarm() {
        let next = state.events.first?.at
        // One that already rang is stale: what it rang for was delivered before this look.
        if let alarm = eventAlarm, alarm.at == next, alarm.at > clock.now() { return }
        if let alarm = eventAlarm { clock.cancel(alarm.id) }
        eventAlarm = nil
        guard let next else { return }
        let id = clock.schedule(atNs: SimulatedClock.nanoseconds(next.sinceOrigin)) { [weak self] in
            self?.signalParked()
        }
        eventAlarm = (next, id)
    }

    /// Hands the link what is due by the clock's time now: after a test moved it, with no driver
    /// parked to look.
    package func deliverDue() {
        locked { _ in }
    }

    /// Moves the clock `duration` ahead through what happens on the link meanwhile: time passing
    /// between rounds, with no driver waiting.
    package func advance(by duration: Duration) {
        run(until: clock.now() + duration) { _ in false }
    }

    // MARK: - Time

    /// Moves the clock to `limit`, or to the first event before it for which `until` holds,
    /// handing each event to the link on its way.
    ///
    /// With the clock `movedByTest`, the calling thread parks on it instead (as `connector`'s,
    /// when it is a driver) until the test moves it to the next event, to `limit`, or a wake.
    func run(until limit: RelayInstant, as connector: Int? = nil, stopWhen until: (inout State) -> Bool) {
        let waiter = DispatchSemaphore(value: 0)
        while true {
            let stop = locked { until(&$0) }
            let now = clock.now()
            if stop || now >= limit { return }
            switch time {
            case .drivenByWaits:
                let next = locked { $0.events.first?.at }
                let target = min(limit, max(now, next ?? limit))
                if target > now { clock.advance(by: target - now) }
            case .movedByTest:
                let key = connector ?? -newConnector()
                parked.withLock { parkedWaiters[key] = (waiter, false) }
                let id = clock.schedule(atNs: SimulatedClock.nanoseconds(limit.sinceOrigin)) { [weak self] in
                    self?.signalParked(key)
                }
                // Looked again once parked: what happened meanwhile is not missed.
                if !locked({ until(&$0) }) { waiter.wait() }
                clock.cancel(id)
                parked.withLock { parkedWaiters[key] = nil }
                while waiter.wait(timeout: .now()) == .success {}
            }
        }
    }

    /// Hands every event due by now to the link, in time order. - Returns: whether there was any.
    @discardableResult
    private func deliverDue(_ state: inout State) -> Bool {
        let now = clock.now()
        var any = false
        while let event = state.events.popDue(now) {
            handle(event, state: &state)
            any = true
        }
        return any
    }

    // MARK: - Segments

    /// Puts `bytes` on the link from `from` on, behind what is queued in that direction, a
    /// segment at a time. - Returns: when the last of them leaves the sending end.
    @discardableResult
    func serialise(up: Bool, id: Int, bytes: [UInt8], from: RelayInstant, state: inout State) -> RelayInstant {
        var offset = 0
        var free = max(from, up ? state.upFreeAt : state.downFreeAt)
        while offset < bytes.count {
            let end = min(bytes.count, offset + Self.segment)
            free = free + link.serialisation(of: end - offset)
            let chunk = Array(bytes[offset..<end])
            state.events.push(LinkEvent(at: free + link.oneWay, kind: up ? .toServer(id, chunk) : .toClient(id, chunk)))
            offset = end
        }
        if up {
            state.upFreeAt = free
            state.counters.bytesUp += bytes.count
        } else {
            state.downFreeAt = free
            state.counters.bytesDown += bytes.count
        }
        return free
    }

    /// A signal with no payload (FIN, reset) behind what the server already sent.
    private func signal(_ kind: LinkEvent.Kind, from: RelayInstant, state: inout State) {
        state.events.push(LinkEvent(at: max(from, state.downFreeAt) + link.oneWay, kind: kind))
    }

    private func handle(_ event: LinkEvent, state: inout State) {
        let now = clock.now()
        if let down = state.down, event.crossesTheLink {
            switch down {
            case .hold: state.held.append(event)
            case .refuse, .close, .drop: break // lost with the link
            }
            return
        }
        switch event.kind {
        case .accept(let id):
            guard var connection = state.connections[id], !connection.isFinished else { return }
            state.counters.connections += 1
            connection.session = connection.server.accept(number: state.counters.connections)
            state.connections[id] = connection
        case .toServer(let id, let bytes):
            guard let connection = state.connections[id], !connection.silenced else { return }
            if connection.serverClosed {
                if !connection.lingering { signal(.resetToClient(id), from: now, state: &state) }
                return
            }
            guard let session = connection.session else { return }
            switch state.fault {
            case nil: apply(session.received(bytes, at: now), id: id, state: &state)
            case .blackHole: break
            case .closeAfterRequest: apply([.close(lingering: true)], id: id, state: &state)
            case .resetMidRequest: apply([.reset()], id: id, state: &state)
            case .resetMidResponse:
                let replies = session.received(bytes, at: now)
                guard
                    let answer = replies.lazy.compactMap({
                        if case .send(let b, let after) = $0 { (b, after) } else { nil }
                    }).first
                else { return apply(replies, id: id, state: &state) }
                apply([.send(Array(answer.0.prefix(5)), after: answer.1), .reset()], id: id, state: &state)
            }
        case .serverSends(let id, let bytes):
            guard let connection = state.connections[id], !connection.serverClosed else { return }
            serialise(up: false, id: id, bytes: bytes, from: now, state: &state)
        case .serverCloses(let id, let lingering, let reset):
            guard var connection = state.connections[id], !connection.serverClosed else { return }
            connection.serverClosed = true
            connection.lingering = lingering
            let unread = connection.session?.holdsUnread ?? false
            state.connections[id] = connection
            signal(reset || (unread && !lingering) ? .resetToClient(id) : .finToClient(id), from: now, state: &state)
        case .toClient(let id, let bytes):
            guard state.connections[id]?.silenced == false else { return }
            state.connections[id]?.inbox.append(contentsOf: bytes)
        case .finToClient(let id):
            state.connections[id]?.peerClosed = true
        case .resetToClient(let id):
            guard state.connections[id]?.failure == nil else { return }
            state.connections[id]?.failure = "Connection reset by peer"
            state.counters.resets += 1
        case .handshake(let id, let step):
            handshake(id, step, now: now, state: &state)
        }
    }

    /// A handshake `SimulatedConnector.connect` began: it ends, fails, or its SYN goes again into
    /// whatever the link is then.
    private func handshake(_ id: Int, _ step: LinkEvent.Handshake, now: RelayInstant, state: inout State) {
        guard var connection = state.connections[id], connection.handshaking else { return }
        switch step {
        case .done:
            connection.handshaking = false
        case .failed(let message):
            connection.handshaking = false
            connection.neverOpened = true
            connection.failure = message
        case .retry:
            guard var retries = connection.retries else { return }
            switch state.down {
            case .refuse?:
                return handshake(id, .failed("Failed to connect: Connection refused"), now: now, state: &state)
            case .close?:
                connection.handshaking = false
                connection.peerClosed = true
            case .hold?:
                connection.handshaking = false
                connection.heldOpen = true
            case .drop?:
                retries.next = retries.next + retries.backoff
                retries.backoff = retries.backoff * 2
                connection.retries = retries
                if retries.next >= retries.deadline {
                    let ms = retries.timeout / .milliseconds(1)
                    state.events.push(
                        LinkEvent(
                            at: retries.deadline,
                            kind: .handshake(id, .failed("Failed to connect: Connection timed out after \(Int(ms)) ms"))
                        ))
                } else {
                    state.events.push(LinkEvent(at: retries.next, kind: .handshake(id, .retry)))
                }
            case nil:
                guard connection.server.listening else {
                    state.events.push(
                        LinkEvent(
                            at: now + link.roundTrip,
                            kind: .handshake(id, .failed("Failed to connect: Connection refused"))))
                    break
                }
                state.events.push(LinkEvent(at: now + link.oneWay, kind: .accept(id)))
                state.events.push(LinkEvent(at: now + link.roundTrip, kind: .handshake(id, .done)))
            }
        }
        state.connections[id] = connection
    }

    /// A session's replies, each after its processing time and never before the one before it.
    private func apply(_ replies: [SimulatedReply], id: Int, state: inout State) {
        var at = max(clock.now(), state.connections[id]?.lastReplyAt ?? .origin)
        for reply in replies {
            switch reply {
            case .send(let bytes, let after):
                at = at + after
                state.events.push(LinkEvent(at: at, kind: .serverSends(id, bytes)))
            case .close(let lingering, let after):
                at = at + after
                state.events.push(LinkEvent(at: at, kind: .serverCloses(id, lingering: lingering, reset: false)))
            case .reset(let after):
                at = at + after
                state.events.push(LinkEvent(at: at, kind: .serverCloses(id, lingering: false, reset: true)))
            }
        }
        state.connections[id]?.lastReplyAt = at
    }
}

import GeoRelayCore
import GeoRelaySpool

/// One destination's loop, whatever its transport: what happens between rounds.
///
/// Each turn takes in where the traffic goes now (the uplink gate's route and budget), lets the
/// transport plan and send a round, and takes in how the round ended: the server answered (full
/// rounds from here), nothing was due (wait for the spool), or no answer came (back off, then a
/// trial or full rounds, as `DestinationLink` found). It owns what every transport shares — the
/// trial, the backoff, the route, the budget's notice and the destination's state in status — so
/// each is decided here once; the transports (`DestinationRounds`) own their rounds.
///
/// A value without I/O: it returns what to do (`Action`), `DestinationLoop.run` does it.
struct DestinationLoop {
    /// What the next round may carry.
    struct Turn: Equatable {
        /// After backing off without proof that the server is back: a small round whose answer decides.
        var trial: Bool
        /// The uplink's budget is spent: alarms and still-alive positions only.
        var restriction: UplinkGate.Restriction?
    }

    /// How a round ended, as its transport reports it.
    enum Report: Equatable {
        /// Nothing to send: wait for the spool's next commit, at most this long.
        case idle(Duration)
        /// Positions were settled without sending (the filter skipped them): plan again at once.
        case again
        /// The server answered the round; `delivered` positions went.
        case answered(delivered: Int)
        /// No answer the round could use: back off.
        case unavailable(reason: String, retryAfter: Double?, transport: Bool)
        /// The server refused the credentials: wait `seconds` (nil: as the backoff says), then try
        /// again with a trial.
        case refused(reason: String, seconds: Double?)
        /// Real time (`buffer: false`) is ready: it tries what arrives from here on.
        case ready
        /// Real time tried each new position once: `dropped` of them got no delivery and are gone.
        /// Never a backoff: backing off would hold what arrives meanwhile, which is buffering.
        case triedOnce(delivered: Int, dropped: Int)
    }

    enum Event: Equatable {
        /// A turn begins: the route's generation and the budget's restriction as the gate has them.
        case turn(route: Int, restriction: UplinkGate.Restriction?)
        case ended(Report)
        /// Backing off ended: how delivery goes on.
        case resumed(DestinationLink.Resumption)
    }

    enum Action: Equatable {
        /// New connections from here on: the traffic takes another route.
        case forgetConnections
        case log(LogLevel, String)
        /// The destination's state in status.
        case record(DestinationState, error: String?, nextAttemptInSeconds: Double? = nil)
        case round(Turn)
        /// Wait for the spool's next commit, at most this long.
        case idle(Duration)
        /// Wait out a failure (`DestinationLink.backOff`), with the loop's backoff.
        case backOff(reason: String, retryAfter: Double?, transport: Bool)
        /// Wait this long (credentials refused), then go on.
        case pause(seconds: Double)
        /// Begin the next turn.
        case next
        /// The loop is over (cancelled while waiting).
        case stop
    }

    var backoff: Backoff
    /// The backoff's jitter after refused credentials.
    private var random: RandomSource.Draws
    private(set) var trial = false
    private(set) var state = DestinationState.online
    private var route: Int
    private var restriction: UplinkGate.Restriction?
    /// The budget's restriction last logged, and whether status shows `deferred` for it.
    private var budgetLogged: String?
    private var deferredShown = false

    init(backoff: Backoff, route: Int, random: RandomSource) {
        self.backoff = backoff
        self.random = random.generator
        self.route = route
    }

    mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .turn(let route, let restriction):
            var actions: [Action] = []
            if route != self.route {
                self.route = route
                actions += [.forgetConnections, .log(.info, "the route moved: new connections from here on")]
            }
            self.restriction = restriction
            actions += budgetNotice(restriction)
            return actions + [.round(Turn(trial: trial, restriction: restriction))]
        case .ended(.idle(let wait)):
            return [.idle(wait)]
        case .ended(.again):
            return [.next]
        case .ended(.answered(let delivered)):
            // The server answered the round (a trial's position included): full rounds from here.
            trial = false
            guard delivered > 0 else { return [.next] }
            backoff.reset()
            // The recorder showed `online` for what went: under a spent budget, `deferred` again next turn.
            if restriction != nil { deferredShown = false }
            let wasOnline = state == .online
            state = .online
            return (wasOnline ? [] : [.log(.notice, "delivering again")]) + [.next]
        case .ended(.unavailable(let reason, let retryAfter, let transport)):
            state = .probing
            return [.backOff(reason: reason, retryAfter: retryAfter, transport: transport)]
        case .ended(.ready):
            return [.record(.online, error: nil), .next]
        case .ended(.triedOnce(let delivered, let dropped)):
            // What was delivered showed the destination online as it went (`DeliveryRecorder`).
            guard dropped > 0 else { return [.next] }
            return [
                .log(
                    .warning,
                    "real-time destination dropped \(dropped) of \(delivered + dropped) positions (buffer is off)"),
                .record(.backoff, error: "dropped \(dropped) positions"), .next,
            ]
        case .ended(.refused(let reason, let given)):
            let seconds = given ?? backoff.nextDelay(using: &random)
            state = .authFailed
            return [
                .log(.error, "authentication failed: \(reason)"),
                .record(.authFailed, error: reason, nextAttemptInSeconds: seconds), .pause(seconds: seconds),
            ]
        case .resumed(.cancelled):
            return [.stop]
        case .resumed(let how):
            trial = how == .trial
            return [.next]
        }
    }

    /// The log hears of each restriction once, and status reads `deferred` while it holds and
    /// `online` once it lifts.
    private mutating func budgetNotice(_ restriction: UplinkGate.Restriction?) -> [Action] {
        var actions: [Action] = []
        if let restriction {
            if budgetLogged != restriction.reason {
                actions.append(.log(.notice, "backlog deferred: \(restriction.reason)"))
                budgetLogged = restriction.reason
            }
            if !deferredShown {
                actions.append(.record(.deferred, error: restriction.reason))
                deferredShown = true
            }
        } else if budgetLogged != nil {
            actions.append(
                .log(
                    .notice,
                    "backlog no longer deferred: the uplink's budget is free again, or another uplink carries the traffic"
                ))
            if deferredShown { actions.append(.record(.online, error: nil)) }
            budgetLogged = nil
            deferredShown = false
        }
        return actions
    }
}

/// A transport behind the destination's loop: its rounds, planned and sent.
protocol DestinationRounds: AnyObject {
    /// The traffic takes another route: new connections from here on.
    func routeMoved() async
    /// Plans a round from the spool (with `order`'s say on what goes first) and sends it.
    func round(_ turn: DestinationLoop.Turn, order: inout DrainOrder) async -> DestinationLoop.Report
    /// The round found no answer: what the transport knows of the path is to be learned anew.
    func linkFailed()
}

extension DestinationLoop {
    /// Runs the loop with `rounds` until the task is cancelled, woken by the spool's commits and
    /// the uplinks' changes.
    static func run(
        _ rounds: some DestinationRounds, settings: Configuration.DestinationSettings, link: DestinationLink,
        recorder: DeliveryRecorder, spool: Spool, logger: Logger, clock: any RelayClock
    ) async {
        let gate = recorder.gate
        let name = settings.name
        let wake = spool.commits.subscribe()
        gate?.watch(wake)
        defer {
            gate?.unwatch(wake)
            spool.commits.unsubscribe(wake)
        }
        await gate?.firstLook(clock: clock)
        var loop = DestinationLoop(
            backoff: Backoff(minSeconds: settings.backoffMinSeconds, maxSeconds: settings.backoffMaxSeconds),
            route: gate?.routeGeneration(for: name) ?? 0, random: link.random)
        var order = DrainOrder(setting: settings.order, currentWithinSeconds: settings.currentWithinSeconds)
        var actions: [Action] = [.next]
        while !Task.isCancelled {
            var event: Event?
            for action in actions {
                switch action {
                case .forgetConnections:
                    await rounds.routeMoved()
                    await link.forgetConnections()
                case .log(let level, let text):
                    logger.log(level, text)
                case .record(let state, let error, let inSeconds):
                    let nextMs = inSeconds.flatMap { CheckedNumbers.milliseconds(seconds: $0) }.map {
                        clock.nowMs().saturatingPlus($0)
                    }
                    recorder.record(state, error: error, nextAttemptMs: nextMs)
                case .round(let turn):
                    link.roundBegins()
                    let report = await rounds.round(turn, order: &order)
                    link.roundEnded()
                    if case .unavailable = report {
                        rounds.linkFailed()
                        order.linkFailed()
                    }
                    event = .ended(report)
                case .idle(let wait):
                    await link.waits { await wake.wait(timeout: wait, clock: clock) }
                    event = .turn(
                        route: gate?.routeGeneration(for: name) ?? 0, restriction: gate?.restriction(for: name))
                case .backOff(let reason, let retryAfter, let transport):
                    event = .resumed(
                        await link.backOff(
                            reason: reason, retryAfter: retryAfter, transport: transport, backoff: &loop.backoff))
                case .pause(let seconds):
                    await link.waits {
                        await clock.sleep(for: .milliseconds(CheckedNumbers.milliseconds(seconds: seconds) ?? 0))
                    }
                    event = .resumed(Task.isCancelled ? .cancelled : .trial)
                case .next:
                    event = .turn(
                        route: gate?.routeGeneration(for: name) ?? 0, restriction: gate?.restriction(for: name))
                case .stop:
                    return
                }
            }
            guard let event, !Task.isCancelled else { return }
            actions = loop.handle(event)
        }
    }
}

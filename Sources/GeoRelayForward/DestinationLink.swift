import GeoRelayCore
import GeoRelaySpool
import Synchronization

/// What every destination does when it cannot deliver: back off with jitter,
/// probe cheaply while nothing answers instead of resending payloads, and tell
/// the spool its state so `georelay status` can show it.
package final class DestinationLink: Sendable {
    let settings: Configuration.DestinationSettings
    private let recorder: DeliveryRecorder
    private let logger: Logger
    private let prober: HTTPWorker
    private let ownProbe: Probe?
    /// Bare connection attempts between probes (`probe.connectSeconds`); nil: probes only.
    private let connectCheck: ConnectAttempt?
    /// The kernel's route, address and link announcements: each brings the next attempt forward.
    private let linkChanges: WakeBroadcast?
    /// The probes' own count, moved to the destination's meter unless nothing crossed the link.
    private let probeMeter: WireMeter
    private let clock: any RelayClock
    /// The backoff's jitter and the probes' spacing: seeded in tests, so a simulated run replays.
    let random: RandomSource
    /// Whether a round is under way: between rounds the destination only waits (on its wake,
    /// a backoff or a pause), which a simulation takes as quiescent.
    private let inRound = Atomic<Bool>(false)
    package var roundUnderWay: Bool { inRound.load(ordering: .acquiring) }
    /// Rounds begun: a simulation tells a drain that ends every round as it begins (no time
    /// passes, nothing goes) from one that waits on the link.
    private let rounds = Atomic<Int>(0)
    package var roundsBegun: Int { rounds.load(ordering: .relaxed) }
    func roundBegins() {
        rounds.add(1, ordering: .relaxed)
        inRound.store(true, ordering: .releasing)
    }
    func roundEnded() { inRound.store(false, ordering: .releasing) }
    /// Waits registered and not yet woken, for time, a wake or the link (a backoff, an idle wait,
    /// a probe): a simulation moves its clock only while every destination is in one, or in a
    /// round that waits on the network. `changes` counts entries and exits, so a wait left and
    /// entered again between two looks is seen.
    private let waitsUnderWay = Atomic<Int>(0)
    private let waitChanges = Atomic<Int>(0)
    package var waiting: (now: Bool, changes: Int) {
        (waitsUnderWay.load(ordering: .acquiring) > 0, waitChanges.load(ordering: .acquiring))
    }

    /// Runs `body`, one wait for time, a wake or the link, marked as one (`WaitMark`): it counts
    /// from the moment its primitive registers it until the moment it is woken.
    func waits<T>(_ body: () async -> T) async -> T {
        let mark = WaitMark { [self] waits in
            waitsUnderWay.add(waits ? 1 : -1, ordering: .releasing)
            waitChanges.add(1, ordering: .releasing)
        }
        defer { mark.end() }
        return await WaitMark.$current.withValue(mark) { await body() }
    }

    /// A destination's own probe, for a protocol an empty GET cannot reach (Traccar's Teltonika
    /// port): what its answer says, and the bytes it cost on the wire.
    package typealias Probe = @Sendable (_ timeout: Duration) async -> (answer: ServerCheck.Answer, wireBytes: Int)
    /// A bare connection attempt of the destination's own, instead of `ConnectCheck`'s (a
    /// simulated link's: `NetworkChecks`).
    package typealias ConnectAttempt = @Sendable () async -> ConnectCheck.Outcome

    /// - Parameters:
    ///   - probe: how to probe instead of `ServerCheck`'s GET; nil for HTTP destinations.
    ///   - recorder: the destination's hand-overs (its meter counts the attempts).
    ///   - probeMeter: where the probe's own connections are counted (the meter `probe` was built with).
    ///   - linkChanges: the kernel's announcements (`UplinkGate.linkChanges`); nil: attempts on schedule only.
    ///   - spare: where a bare attempt's connection across the link is kept for the next round.
    ///   - connect: how a bare attempt is made instead of `ConnectCheck`'s (with `probe.connectSeconds` set).
    ///   - random: the jitter's draws (the system's, or a test's seed).
    init(
        settings: Configuration.DestinationSettings, recorder: DeliveryRecorder, logger: Logger, probe: Probe? = nil,
        probeMeter: WireMeter = WireMeter(), linkChanges: WakeBroadcast? = nil, spare: SpareConnection? = nil,
        connect: ConnectAttempt? = nil, clock: any RelayClock = SystemClock(), random: RandomSource = .system
    ) throws {
        self.random = random
        self.settings = settings
        self.linkChanges = linkChanges
        self.recorder = recorder
        self.logger = logger
        self.probeMeter = probeMeter
        self.clock = clock
        self.prober = try HTTPWorker(label: "georelay.probe.\(settings.name)", tls: settings.tls, meter: probeMeter)
        self.ownProbe = probe
        if settings.probeConnectSeconds > 0, let connect {
            connectCheck = connect
        } else if let check = ConnectCheck(settings: settings, meter: recorder.meter, spare: spare, clock: clock) {
            connectCheck = { await check.attempt() }
        } else {
            connectCheck = nil
        }
    }

    /// How delivery goes on after backing off.
    package enum Resumption: Sendable, Equatable {
        /// A probe got an answer only the destination's server gives: deliver at full speed.
        case proven
        /// Send a small real payload; its answer decides.
        case trial
        /// The task was cancelled while waiting.
        case cancelled
    }

    /// Waits out a failure, and says how to go on.
    ///
    /// A probe is an optimisation, never a gate: it decides nothing but how
    /// soon the next payload goes, so no server's answer to a GET can hold
    /// delivery for longer than one backoff ceiling.
    /// - After an HTTP answer to a payload (`transport` false: a 503, a 429, a
    ///   portal's page), the link is up: the next attempt is a payload at the
    ///   backoff time, and no probe is sent.
    /// - After no answer at all, `ReturnWatch` decides how the link's return is looked for (bare
    ///   connections every `probe.connectSeconds`, quicker where this side of the uplink answers
    ///   for it; probes at most every `probe.intervalSeconds`), and this carries it out. A probe
    ///   answered by the server resumes delivery at once; any other HTTP answer (an HTML error
    ///   page, a redirect) shows a path, so a payload goes at the backoff time; and if no probe is
    ///   answered, a payload still goes once per backoff ceiling, in case only the probe cannot get through.
    package func backOff(reason: String, retryAfter: Double?, transport: Bool, backoff: inout Backoff) async
        -> Resumption
    {
        var draws = random.generator
        let delay = max(backoff.nextDelay(using: &draws), retryAfter ?? 0)
        logger.warning("unavailable (\(reason)); next attempt in \(Int(delay.rounded())) s")
        let started = clock.monotonicNs()
        guard transport else {
            let payloadAt = started.saturatingPlus(ReturnWatch.ns(seconds: delay))
            show(.backoff, reason: reason, atNs: payloadAt)
            await waits { await clock.sleep(untilNs: payloadAt) }
            return Task.isCancelled ? .cancelled : .trial
        }
        var watch = ReturnWatch(
            delaySeconds: delay, ceilingSeconds: backoff.maxSeconds, backoffMinSeconds: backoff.minSeconds,
            timing: .init(
                connectEvery: connectCheck == nil ? nil : settings.probeConnectInterval,
                probeTimeout: settings.probeTimeout,
                probeIntervalSeconds: settings.probeIntervalSeconds, wakesOnLinkChanges: linkChanges != nil),
            nowNs: started, random: random.generator)
        let changes = linkChanges?.subscribe()
        defer { if let changes { linkChanges?.unsubscribe(changes) } }
        var actions = watch.start(nowNs: started)
        while !Task.isCancelled {
            var event: ReturnWatch.Event?
            for action in actions {
                switch action {
                case .note(let text):
                    logger.info(text)
                case .show(let state, let atNs):
                    show(state, reason: reason, atNs: atNs)
                case .connect:
                    guard let connectCheck else { return .cancelled }
                    event = .connected(await waits { await connectCheck() })
                case .probe(let timeout):
                    let probed = clock.monotonicNs()
                    let answer = await waits { await probe(timeout: timeout) }
                    event = .probed(answer, tookNs: clock.monotonicNs() - probed)
                case .sleep(let until, let earliestOnChange):
                    if let changes, let earliestOnChange {
                        // A wake that came while the attempt ran is taken now (the change may be
                        // what let it fail); half a second between attempts however the kernel chatters.
                        let now = clock.monotonicNs()
                        await waits {
                            await changes.wait(
                                timeout: .nanoseconds(Int64(clamping: until > now ? until - now : 0)), clock: clock)
                        }
                        await waits { await clock.sleep(untilNs: min(until, earliestOnChange)) }
                    } else {
                        await waits { await clock.sleep(untilNs: until) }
                    }
                    event = .woke
                case .resume(let how):
                    return how
                }
            }
            guard let event, !Task.isCancelled else { break }
            actions = watch.handle(event, nowNs: clock.monotonicNs())
        }
        return .cancelled
    }

    /// Shows `state` in status, the next attempt at `atNs` on the monotonic clock.
    private func show(_ state: DestinationState, reason: String, atNs: UInt64) {
        let now = clock.monotonicNs()
        let inMs = Int64(clamping: (atNs > now ? atNs - now : 0) / 1_000_000)
        recorder.record(state, error: reason, nextAttemptMs: clock.nowMs().saturatingPlus(inMs))
    }

    /// A cheap check that the destination is back: the destination's own probe when it has one,
    /// else GET `probe.url`, or an empty request to the destination itself (`ServerCheck`). Its
    /// wire bytes count against the uplink, and its budget, like a payload's.
    ///
    /// A probe that got nothing quicker than any uplink's round trip was closed on this side of it
    /// (a terminal's accelerator while its satellite is down): it crossed nothing and is not billed.
    func probe(timeout: Duration) async -> ServerCheck.Answer {
        let started = clock.monotonicNs()
        let answer: ServerCheck.Answer
        var payloadBytes = 0
        if let ownProbe {
            (answer, payloadBytes) = await ownProbe(timeout)
        } else {
            let request = ServerCheck.request(
                url: settings.probeURL ?? settings.url, connectTimeoutSeconds: settings.connectTimeoutSeconds,
                timeout: timeout)
            let result = await prober.perform(request)
            payloadBytes = (try? result.get())?.wireBytes ?? 0
            answer = ServerCheck.answer(result, ownURL: settings.probeURL == nil)
        }
        let here = answer == .nothing && clock.monotonicNs() - started < ReturnWatch.ns(ConnectCheck.answeredHere)
        // A probe that got no answer from beyond still cost its connection attempts (SYNs on a dead link).
        let billed = probeMeter.take()
        var update = DeliveryUpdate(destination: settings.name)
        if !here {
            recorder.meter.bill(billed)
            update.payloadBytes = payloadBytes
        }
        recorder.record(update)
        return answer
    }

    /// The probe's next request opens a new connection (the route moved).
    func forgetConnections() async {
        await prober.forgetConnections()
    }
}

import GeoRelayCore
import GeoRelaySpool

/// What every destination does when it cannot deliver: back off with jitter,
/// probe cheaply while nothing answers instead of resending payloads, and tell
/// the spool its state so `georelay status` can show it.
package final class DestinationLink: Sendable {
    let settings: Configuration.DestinationSettings
    private let spool: Spool
    private let logger: Logger
    private let prober: HTTPWorker
    private let ownProbe: Probe?
    private let meter: WireMeter?
    /// Bare connection attempts between probes (`probe.connectSeconds`); nil: probes only.
    private let connectCheck: ConnectCheck?
    /// The kernel's route, address and link announcements: each brings the next attempt forward.
    private let linkChanges: WakeBroadcast?

    /// A destination's own probe, for a protocol an empty GET cannot reach (Traccar's Teltonika
    /// port): what its answer says, and the bytes it cost on the wire.
    typealias Probe = @Sendable () async -> (answer: ServerCheck.Answer, wireBytes: Int)

    /// - Parameters:
    ///   - probe: how to probe instead of `ServerCheck`'s GET; nil for HTTP destinations.
    ///   - linkChanges: the kernel's announcements (`UplinkGate.linkChanges`); nil: attempts on schedule only.
    init(
        settings: Configuration.DestinationSettings, spool: Spool, logger: Logger, probe: Probe? = nil,
        meter: WireMeter? = nil,
        linkChanges: WakeBroadcast? = nil
    ) throws {
        self.settings = settings
        self.linkChanges = linkChanges
        self.spool = spool
        self.logger = logger
        self.meter = meter
        self.prober = try HTTPWorker(label: "georelay.probe.\(settings.name)", tls: settings.tls, meter: meter)
        self.ownProbe = probe
        self.connectCheck = ConnectCheck(settings: settings, meter: meter)
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

    /// The most positions a trial carries. After the link's return a trial is the devices'
    /// current positions (one each; push: one compressed batch of about a kilobyte), so a fleet's
    /// all go in it rather than one of them ahead of the others' round; against a path that
    /// swallows it, a trial goes once per backoff ceiling or once per return of the link.
    static let trialPositions = 64

    /// A trial's positions for `devices` devices with something to send, within what a budget
    /// leaves (`fitting`): one each, at least one, at most `trialPositions`.
    static func trialPositions(devices: Int, fitting: Int) -> Int {
        max(1, min(devices, trialPositions, fitting))
    }

    /// Waits out a failure, and says how to go on.
    ///
    /// A probe is an optimisation, never a gate: it decides nothing but how
    /// soon the next payload goes, so no server's answer to a GET can hold
    /// delivery for longer than one backoff ceiling.
    /// - After an HTTP answer to a payload (`transport` false: a 503, a 429, a
    ///   portal's page), the link is up: the next attempt is a payload at the
    ///   backoff time, and no probe is sent.
    /// - After no answer at all, probes (a few hundred bytes each, at most every
    ///   `probe.intervalSeconds`) notice the link's return early instead of
    ///   payloads that cannot arrive. Between probes a bare TCP connection is tried every
    ///   `probe.connectSeconds` (free on a dead link). One that opens after attempts failed is
    ///   the link's return: a trial payload goes at once instead of a probe (about a probe's
    ///   bytes, and its answer proves the server as well), saving the probe's own connection
    ///   and round trip before the current positions go. One that opens at the first attempt
    ///   shows the failure is above TCP (a server or middlebox that takes connections and
    ///   resets or ignores them), so it brings the probe forward instead, and if that probe gets
    ///   no answer the attempts stop until the next backoff: on such a path each one costs its
    ///   handshake, and the probes' own spacing holds. A probe answered by the server resumes
    ///   delivery at once; any other HTTP answer (an HTML error page, a
    ///   redirect) shows a path, so a payload goes at the backoff time; and if
    ///   no probe is answered, a payload still goes once per backoff ceiling,
    ///   in case only the probe cannot get through.
    package func backOff(reason: String, retryAfter: Double?, transport: Bool, backoff: inout Backoff) async
        -> Resumption
    {
        let delay = max(backoff.nextDelay(), retryAfter ?? 0)
        logger.warning("unavailable (\(reason)); next attempt in \(Int(delay.rounded())) s")
        let clock = ContinuousClock()
        let started = clock.now
        let payloadAt = started + .milliseconds(Int(delay * 1000))
        guard transport else {
            recordState(.backoff, error: reason, nextAttemptMs: WallClock.nowMs() + Int64(delay * 1000))
            try? await Task.sleep(until: payloadAt, clock: clock)
            return Task.isCancelled ? .cancelled : .trial
        }
        // Probes start at the backoff floor and slow to the probe interval; the insurance
        // payload goes one ceiling (or the server's Retry-After, if longer) after the failure.
        let ceilingAt = started + .milliseconds(Int(max(delay, backoff.maxSeconds) * 1000))
        var probeSpacing = Backoff(
            minSeconds: min(backoff.minSeconds, settings.probeIntervalSeconds),
            maxSeconds: settings.probeIntervalSeconds)
        /// Whether a connection that opens may bring the next probe forward.
        var connectionsMayProbe = true
        /// Whether a connection attempt has failed in this wait: the link itself was down.
        var attemptsFailed = false
        var firstLook = true
        while !Task.isCancelled {
            let probeAt = min(clock.now + .milliseconds(Int(probeSpacing.nextDelay() * 1000)), ceilingAt)
            recordState(.probing, error: reason, nextAttemptMs: WallClock.nowMs() + Self.milliseconds(until: probeAt))
            let early: Bool
            if connectionsMayProbe {
                let attempts = await connectionOpens(before: probeAt, clock: clock, announce: firstLook)
                attemptsFailed = attemptsFailed || attempts.failed > 0
                early = attempts.opened
            } else {
                early = false
            }
            firstLook = false
            if early, attemptsFailed, !Task.isCancelled {
                logger.info(
                    "a connection to the destination opened after the link was down: sending one position to try it")
                return .trial
            }
            if !early { try? await Task.sleep(until: probeAt, clock: clock) }
            if Task.isCancelled { break }
            if clock.now >= ceilingAt { return .trial }
            let answer = await probe()
            if early && answer == .nothing { connectionsMayProbe = false }
            switch answer {
            case .server:
                return .proven
            case .path:
                // Something answers HTTP: no more probes, a payload at the backoff time tells.
                logger.info("a probe got an answer that does not prove the server; a payload goes at the backoff time")
                recordState(
                    .backoff, error: reason, nextAttemptMs: WallClock.nowMs() + Self.milliseconds(until: payloadAt))
                try? await Task.sleep(until: payloadAt, clock: clock)
                return Task.isCancelled ? .cancelled : .trial
            case .nothing:
                continue
            }
        }
        return .cancelled
    }

    /// Tries a bare connection every `probe.connectSeconds`, and at once when the kernel announces
    /// a route, address or link change (an interface up, a modem's route back), until one opens
    /// or `deadline` comes; not opened at once without a `ConnectCheck`. `failed`: the attempts
    /// that did not open before the one that did (or before the deadline).
    ///
    /// An attempt refused on this side of the uplink (`ConnectCheck.Outcome.refusedHere`: the
    /// terminal's router or modem saying its link is down, or this host) cost nothing, so the next
    /// goes after half a second instead: the link's return is seen within half a second for
    /// nothing. A refusal from beyond the link (the server's host up, its port closed) cost its
    /// bytes, and a timeout took its time: the spacing holds.
    /// - Parameter announce: say, after the first attempt fails, how the link's return will be seen.
    private func connectionOpens(
        before deadline: ContinuousClock.Instant, clock: ContinuousClock,
        announce: Bool
    ) async -> (opened: Bool, failed: Int) {
        guard let connectCheck else { return (false, 0) }
        let every = Duration.milliseconds(Int(max(0.1, settings.probeConnectSeconds) * 1000))
        let changes = linkChanges?.subscribe()
        defer { if let changes { linkChanges?.unsubscribe(changes) } }
        var failed = 0
        while !Task.isCancelled {
            let attempted = clock.now
            if attempted >= deadline { return (false, failed) }
            let outcome = await connectCheck.attempt()
            if outcome == .opened {
                if failed == 0 { logger.info("a connection to the destination opened: probing now") }
                return (true, failed)
            }
            failed += 1
            let spacing = Self.spacing(after: outcome, every: every)
            if failed == 1, announce {
                let local =
                    spacing < every ? " (every \(Self.phrase(spacing)) while this side of the uplink refuses)" : ""
                logger.info(
                    "no connection to the destination: trying every \(Self.phrase(every))\(local)\(changes == nil ? "" : " and when the network changes")"
                )
            }
            if let changes {
                // Until the next attempt or the probe, whichever comes first; a wake that came while
                // the attempt ran is taken now (the change may be what let it fail).
                await changes.wait(timeout: clock.now.duration(to: min(attempted + spacing, deadline)))
                // Half a second between attempts however the kernel chatters (a flapping modem).
                try? await Task.sleep(until: min(attempted + Self.quickestAttempts, deadline), clock: clock)
            } else {
                if attempted + spacing >= deadline { return (false, failed) }
                try? await Task.sleep(until: attempted + spacing, clock: clock)
            }
        }
        return (false, failed)
    }

    static let quickestAttempts = Duration.milliseconds(500)

    /// The wait from one failed attempt to the next: `quickestAttempts` after a refusal from this
    /// side of the uplink (free), else `every`.
    static func spacing(after outcome: ConnectCheck.Outcome, every: Duration) -> Duration {
        outcome == .refusedHere ? min(every, quickestAttempts) : every
    }

    /// "2 s", or "500 ms" for a part of a second: from the Duration's own integers, no Double.
    private static func phrase(_ interval: Duration) -> String {
        let (seconds, attoseconds) = interval.components
        return attoseconds == 0 ? "\(seconds) s" : "\(seconds * 1000 + attoseconds / 1_000_000_000_000_000) ms"
    }

    /// From now until `instant`, for the wall-clock time status shows as the next attempt.
    private static func milliseconds(until instant: ContinuousClock.Instant) -> Int64 {
        max(0, Int64(ContinuousClock.now.duration(to: instant) / .milliseconds(1)))
    }

    /// A cheap check that the destination is back: the destination's own probe when it has one,
    /// else GET `probe.url`, or an empty request to the destination itself (`ServerCheck`). Its
    /// wire bytes count against the uplink like a payload's.
    func probe() async -> ServerCheck.Answer {
        if let ownProbe {
            let (answer, wireBytes) = await ownProbe()
            record(payloadBytes: wireBytes)
            return answer
        }
        let request = ServerCheck.request(
            url: settings.probeURL ?? settings.url, connectTimeoutSeconds: settings.connectTimeoutSeconds)
        let result = await prober.perform(request)
        // A probe that got no answer still cost its connection attempts (SYNs on a dead link).
        record(payloadBytes: (try? result.get())?.wireBytes ?? 0)
        return ServerCheck.answer(result, ownURL: settings.probeURL == nil)
    }

    /// Records a probe's bytes: what the link billed (the meter) as the wire bytes, the HTTP bytes
    /// beside them.
    private func record(payloadBytes: Int) {
        var update = DeliveryUpdate(destination: settings.name)
        update.wireBytes = payloadBytes
        if let meter { update.billWire(meter) }
        if update.wireBytes > 0 || update.payloadBytes > 0 { spool.record(update) }
    }

    /// The probe's next request opens a new connection (the route moved).
    func forgetConnections() async {
        await prober.forgetConnections()
    }

    package func recordState(_ state: DestinationState, error: String?, nextAttemptMs: Int64?) {
        var update = DeliveryUpdate(destination: settings.name)
        update.state = .init(state: state, lastError: error, nextAttemptMs: nextAttemptMs)
        spool.record(update)
    }
}

import GeoRelayCore
import GeoRelaySpool

/// How a destination watches for the link's return after a failure that got no answer: when to
/// try a bare connection, when to probe and for how long, and when payloads go again. No I/O and
/// no clock of its own: `DestinationLink` carries out each action on the clock it is handed and
/// reports what came of it.
///
/// The rule it keeps (`../shared/LINKS.md`): an answer that came quicker than any uplink's round
/// trip (`ConnectCheck.answeredHere`) came from this side of the uplink. It cost nothing on the
/// link and says nothing of the far side, so the next look goes half a second later. Terminals
/// differ in how they say their satellite is down, and each is read so:
/// - **refuses** (a reset from the terminal's router): attempts every half second; the first
///   connection that opens afterwards is the return, and the current positions go at once.
/// - **drops** (the handshake unanswered): attempts every `probe.connectSeconds`; the same.
/// - **closes** (a TCP accelerator answers the handshake on board and closes): the connection
///   tells nothing, so a probe goes through it; closed on this side too, the next pair goes half a
///   second later, for nothing.
/// - **holds** (the accelerator keeps the connection silent and carries it through on the
///   return): the probe is given until the next probe was due, plus its own timeout, so one is
///   always waiting on board and its answer is the return: still one probe a probe interval.
/// A connection that opened across the link at the first attempt shows a failure above TCP (a
/// server or middlebox that takes connections and drops requests): one probe goes at once, and if
/// it gets nothing, connections stop until the backoff's insurance payload (each would cost its
/// handshake there) and probes keep their spacing.
struct ReturnWatch {
    enum Action: Equatable {
        /// Log this at info level.
        case note(String)
        /// Show this state, with the next attempt at `atNs` (monotonic).
        case show(DestinationState, atNs: UInt64)
        /// Try a bare connection, and report `.connected`.
        case connect
        /// Probe, allowing it `timeout`, and report `.probed`.
        case probe(timeout: Duration)
        /// Sleep until `untilNs`, and report `.woke`. With `earliestOnChangeNs`, a route, address or
        /// link change the kernel announces brings the wake forward, though no sooner than that.
        case sleep(untilNs: UInt64, earliestOnChangeNs: UInt64?)
        /// Stop watching: payloads go again.
        case resume(DestinationLink.Resumption)
    }

    enum Event: Equatable {
        case connected(ConnectCheck.Outcome)
        case probed(ServerCheck.Answer, tookNs: UInt64)
        case woke
    }

    struct Timing {
        /// Between bare connection attempts; nil: probes only.
        var connectEvery: Duration?
        /// A probe's own timeout (twice the connect timeout).
        var probeTimeout: Duration
        var probeIntervalSeconds: Double
        /// Whether the kernel's link changes wake the watch.
        var wakesOnLinkChanges = false
    }

    private let timing: Timing
    /// When a payload goes whatever the probes say: the backoff's ceiling (or a longer Retry-After).
    private let ceilingNs: UInt64
    /// When a payload goes after an answer that shows a path but not the server.
    private let payloadNs: UInt64
    private var probeSpacing: Backoff
    /// The probes' jitter: seeded in tests.
    private var random: any RandomNumberGenerator
    /// When the next probe is due.
    private var probeAtNs: UInt64 = 0
    private var lastAttemptNs: UInt64 = 0
    /// An attempt failed in this wait: the link itself was down, so a connection that opens is its return.
    private var sawDown = false
    /// The last connection attempt failed: the link is down below TCP, and the attempts will see
    /// it return (a probe now could only open a connection they would open too, a round trip later).
    private var attemptsFailing = false
    /// When the next attempt may go after the last failed one.
    private var attemptDueNs: UInt64 = 0
    /// A probe after a connection across the link got nothing: attempts stop (see the type's comment).
    private var connectionsMayProbe = true
    /// The connection before the probe in flight opened on this side of the uplink.
    private var probeThroughHere = false
    private var awaitingPayload = false
    private var announcedAttempts = false
    private var announcedHere = false

    /// - Parameters:
    ///   - delaySeconds: the backoff's delay for this failure.
    ///   - ceilingSeconds: the backoff's ceiling.
    init(
        delaySeconds: Double, ceilingSeconds: Double, backoffMinSeconds: Double, timing: Timing, nowNs: UInt64,
        random: any RandomNumberGenerator
    ) {
        self.timing = timing
        self.random = random
        payloadNs = nowNs.saturatingPlus(Self.ns(seconds: delaySeconds))
        ceilingNs = nowNs.saturatingPlus(Self.ns(seconds: max(delaySeconds, ceilingSeconds)))
        // Probes start at the backoff floor and slow to the probe interval.
        probeSpacing = Backoff(
            minSeconds: min(backoffMinSeconds, timing.probeIntervalSeconds), maxSeconds: timing.probeIntervalSeconds)
    }

    mutating func start(nowNs: UInt64) -> [Action] {
        nextSlot(nowNs: nowNs) + look(nowNs: nowNs)
    }

    mutating func handle(_ event: Event, nowNs: UInt64) -> [Action] {
        // The insurance payload, or the payload after an answer that showed a path.
        if nowNs >= ceilingNs || (awaitingPayload && event == .woke) { return [.resume(.trial)] }
        switch event {
        case .woke:
            return look(nowNs: nowNs)
        case .connected(let outcome):
            return connected(outcome, nowNs: nowNs)
        case .probed(let answer, let tookNs):
            return probed(answer, tookNs: tookNs, nowNs: nowNs)
        }
    }

    // MARK: - Steps

    /// The next look at the link: a probe when one is due, else a bare connection when they are
    /// tried, else a sleep until the probe. While attempts fail below TCP, a probe due is not
    /// sent (its slot passes): the attempts will see the return first and cheaper.
    private mutating func look(nowNs: UInt64) -> [Action] {
        let attempts = timing.connectEvery != nil && connectionsMayProbe
        var actions: [Action] = []
        if nowNs >= probeAtNs {
            guard attempts, attemptsFailing else {
                probeThroughHere = false
                return [.probe(timeout: timing.probeTimeout)]
            }
            actions = nextSlot(nowNs: nowNs)
            if attemptDueNs > nowNs {
                let earliest =
                    timing.wakesOnLinkChanges
                    ? lastAttemptNs.saturatingPlus(Self.ns(Self.quickestAttempts)) : nil
                return actions + [.sleep(untilNs: attemptDueNs, earliestOnChangeNs: earliest)]
            }
        }
        guard attempts else { return actions + [.sleep(untilNs: probeAtNs, earliestOnChangeNs: nil)] }
        lastAttemptNs = nowNs
        return actions + [.connect]
    }

    private mutating func connected(_ outcome: ConnectCheck.Outcome, nowNs: UInt64) -> [Action] {
        switch outcome {
        case .opened, .openedHere:
            attemptsFailing = false
            if sawDown {
                return [
                    .note(
                        "a connection to the destination opened after the link was down: sending one position to try it"
                    ),
                    .resume(.trial),
                ]
            }
            probeThroughHere = outcome == .openedHere
            // Through a connection opened on board the probe waits there until the next was due:
            // a terminal that holds it carries it across on the link's return.
            let untilDue = probeAtNs > nowNs ? probeAtNs - nowNs : 0
            let timeout = probeThroughHere ? Self.duration(ns: untilDue) + timing.probeTimeout : timing.probeTimeout
            let note = probeThroughHere ? [] : [Action.note("a connection to the destination opened: probing now")]
            return note + [.probe(timeout: timeout)]
        case .refusedHere, .failed:
            sawDown = true
            attemptsFailing = true
            let every = timing.connectEvery ?? .seconds(2)
            let spacing = Self.spacing(after: outcome, every: every)
            var actions: [Action] = []
            if !announcedAttempts {
                announcedAttempts = true
                let local =
                    spacing < every ? " (every \(Self.phrase(spacing)) while this side of the uplink refuses)" : ""
                actions.append(
                    .note(
                        "no connection to the destination: trying every \(Self.phrase(every))\(local)\(timing.wakesOnLinkChanges ? " and when the network changes" : "")"
                    ))
            }
            attemptDueNs = lastAttemptNs.saturatingPlus(Self.ns(spacing))
            let next = min(attemptDueNs, probeAtNs)
            let earliest =
                timing.wakesOnLinkChanges
                ? min(lastAttemptNs.saturatingPlus(Self.ns(Self.quickestAttempts)), probeAtNs) : nil
            return actions + [.sleep(untilNs: max(next, nowNs), earliestOnChangeNs: earliest)]
        }
    }

    private mutating func probed(_ answer: ServerCheck.Answer, tookNs: UInt64, nowNs: UInt64) -> [Action] {
        switch answer {
        case .server:
            return [.resume(.proven)]
        case .path:
            // Something answers HTTP: no more probes, a payload at the backoff time tells.
            awaitingPayload = true
            return [
                .note("a probe got an answer that does not prove the server; a payload goes at the backoff time"),
                .show(.backoff, atNs: payloadNs), .sleep(untilNs: payloadNs, earliestOnChangeNs: nil),
            ]
        case .nothing:
            break
        }
        // A probe at or after its slot's time spends the slot: the next is scheduled.
        let slot = nowNs >= probeAtNs ? nextSlot(nowNs: nowNs) : []
        if tookNs < Self.ns(ConnectCheck.answeredHere) {
            // Closed on this side (an accelerator whose satellite is down): free, so again shortly.
            var actions = slot
            if !announcedHere {
                announcedHere = true
                actions.append(
                    .note(
                        "connections open on this side of the uplink and close unanswered (a terminal's accelerator while its satellite is down): looking again every \(Self.phrase(Self.quickestAttempts)), which costs nothing on the link"
                    ))
            }
            lastAttemptNs = nowNs
            let next = min(nowNs.saturatingPlus(Self.ns(Self.quickestAttempts)), probeAtNs)
            return actions + [.sleep(untilNs: next, earliestOnChangeNs: nil)]
        }
        let heldOnBoard = probeThroughHere
        probeThroughHere = false
        if slot.isEmpty {
            // Before its slot's time: a probe brought forward by a connection. One opened across
            // the link, then nothing: the failure is above TCP, and connections stop.
            if !heldOnBoard, timing.connectEvery != nil { connectionsMayProbe = false }
            return [.sleep(untilNs: probeAtNs, earliestOnChangeNs: nil)]
        }
        // Through a terminal that held it, the next probe waits on board in turn, at once.
        guard heldOnBoard, connectionsMayProbe else {
            return slot + [.sleep(untilNs: probeAtNs, earliestOnChangeNs: nil)]
        }
        return slot + look(nowNs: nowNs)
    }

    /// The shortest wait between two looks that cost nothing: however the kernel chatters or a
    /// terminal answers on board, no quicker.
    static let quickestAttempts = Duration.milliseconds(500)

    /// The wait from one failed attempt to the next: `quickestAttempts` after a refusal from this
    /// side of the uplink (free), else `every`.
    static func spacing(after outcome: ConnectCheck.Outcome, every: Duration) -> Duration {
        outcome == .refusedHere ? min(every, quickestAttempts) : every
    }

    /// Schedules the next probe, and shows it.
    private mutating func nextSlot(nowNs: UInt64) -> [Action] {
        probeAtNs = min(nowNs.saturatingPlus(Self.ns(seconds: probeSpacing.nextDelay(using: &random))), ceilingNs)
        return [.show(.probing, atNs: probeAtNs)]
    }

    // MARK: - Arithmetic

    static func ns(seconds: Double) -> UInt64 {
        guard seconds > 0 else { return 0 }
        guard seconds < 1e9 else { return .max }
        return UInt64(seconds * 1e9)
    }

    static func ns(_ duration: Duration) -> UInt64 { SystemClock.nanoseconds(duration) }

    static func duration(ns: UInt64) -> Duration { .nanoseconds(Int64(clamping: ns)) }

    /// "2 s", or "500 ms" for a part of a second: from the Duration's own integers, no Double.
    static func phrase(_ interval: Duration) -> String {
        let (seconds, attoseconds) = interval.components
        return attoseconds == 0 ? "\(seconds) s" : "\(seconds * 1000 + attoseconds / 1_000_000_000_000_000) ms"
    }
}

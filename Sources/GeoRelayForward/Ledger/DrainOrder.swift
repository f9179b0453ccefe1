import GeoRelayCore

/// Which goes first while a device is behind (after an outage, a start-up, a budget freed, a
/// route moved): its history, oldest first, or its current position.
///
/// Traccar decides on order, not on fix time alone. Its event handlers skip every position older
/// than the device's latest (`BasePositionEventHandler`: geofences, overspeed, motion, ignition,
/// driver, maintenance, alarms), and its distance chain runs from the latest (`DistanceHandler`).
/// History sent after the current position raises no event at all. So history goes first while
/// the current position can wait for it, and the current position goes first only when it cannot:
///
/// - `current-first`: each device's newest first, then its history (the relay's order before).
/// - `oldest-first`: the history first, however long it takes.
/// - `auto`: the history first until 80 % of `currentWithin` has passed since the backfill
///   began; a round of history then gives way, each device's newest goes, and the rest of the
///   history follows it (the rest of the ride is `current-first`). A backlog the link carries in
///   time is all in order; a larger one gets its first seconds in order and its current position
///   within `currentWithin`. The time the drain really takes decides, not a forecast of it: right
///   after an outage, a route change or a restart the link's rate is least known.
///
/// A value without I/O; the time is handed in (`RelayClock.now()`).
struct DrainOrder: Sendable {
    let setting: Configuration.DrainOrderSetting
    let currentWithin: Duration
    /// When the present backfill began; nil while no device is behind.
    private(set) var since: RelayInstant?
    /// The current positions went ahead in this backfill: what is left is history to the server.
    private(set) var gaveWay = false
    /// How long the last round of current positions took.
    private var aheadRound = Duration.zero

    init(setting: Configuration.DrainOrderSetting, currentWithinSeconds: Double) {
        self.setting = setting
        currentWithin = .milliseconds(CheckedNumbers.milliseconds(seconds: currentWithinSeconds, max: 86_400) ?? 10_000)
    }

    /// Of `currentWithin`, what history may take: the rest is the current positions' round.
    static let historyShare = 0.8

    /// Whether devices behind send their newest ahead of their history in the next round.
    func currentAhead(at now: RelayInstant) -> Bool {
        switch setting {
        case .currentFirst: true
        case .oldestFirst: false
        case .auto: gaveWay || (since.map { now >= $0 + currentWithin * Self.historyShare } ?? false)
        }
    }

    /// How much longer a round of history may run before it gives way to the current positions;
    /// nil when it need not (no backfill under `auto`, or it gave way already).
    func historyLeft(at now: RelayInstant) -> Duration? {
        guard setting == .auto, !gaveWay, let since else { return nil }
        return max(.zero, since + currentWithin * Self.historyShare - now)
    }

    /// Takes in what a round planned: a backfill begins with the first round that found a device
    /// behind, and ends with the first that found none (or nothing to send at all). It has given
    /// way once current positions went ahead, or were due and found at the server already
    /// (`currentAtServer`): a history that waited for a give-way that has nothing to send would
    /// end every round at once, its time long gone, and the drain would stop.
    mutating func observe(
        _ kind: RoundPlanner.Kind?, backfilling: Bool, currentAtServer: Bool = false, at now: RelayInstant
    ) {
        switch kind {
        case .backlog?, .current?, nil:
            if backfilling || kind == .current {
                if since == nil { since = now }
                if kind == .current || currentAtServer { gaveWay = true }
            } else {
                since = nil
                gaveWay = false
            }
        case .alarms?, .stillAlive?, .replay?:
            break
        }
    }

    /// How a round of history meets the live fixes committed while it runs.
    enum LiveEdge: Equatable, Sendable {
        /// Nothing ends it for them: no backfill, or its current positions do not go ahead yet.
        case none
        /// They join the running round as they commit (`LiveJoin`), and the next round is history
        /// again: requests per position on a kept pipeline (OsmAnd) cost nothing to add.
        case join
        /// The first of them after `after` ends it, and the next round sends each device's newest.
        case giveWay(after: Duration)
    }

    /// The live edge of the next round of history. `joinable`: its transport takes positions into
    /// a running round. A give-way leaves the link idle for about two round trips (the answers in
    /// flight come in, then the newest goes alone), so it comes at most every ten of those (ten
    /// times the last round of current positions, `currentRoundTook`), never sooner than 2 s and
    /// never later than 10 s (a slow round of many devices must not hold live fixes back for
    /// minutes): on the geo link (600 ms) about a tenth of the drain, where a fixed 2 s cost more
    /// than half of it.
    func liveEdge(at now: RelayInstant, backfilling: Bool, joinable: Bool) -> LiveEdge {
        guard backfilling, currentAhead(at: now) else { return .none }
        return joinable ? .join : .giveWay(after: min(.seconds(10), max(.seconds(2), aheadRound * 10)))
    }

    /// A round of current positions took `elapsed` (about a round trip).
    mutating func currentRoundTook(_ elapsed: Duration) {
        aheadRound = elapsed
    }

    /// Whether the next batch of a window that carries a backfill sends the live fixes ahead
    /// (push): when current positions go ahead at all, and not again within two round trips (a
    /// second at least) of the last time they did. Such a batch rides in the window, which goes on
    /// behind it, so it costs the link one small request, not an idle pipeline: on the geo link
    /// (600 ms) a request of a few hundred bytes every 1.2 s, a few per cent of it, and a live fix
    /// waits that long at most before it goes.
    func currentDue(at now: RelayInstant, lastAheadAt: RelayInstant?, roundTrip: Duration?) -> Bool {
        let interval = max(.seconds(1), (roundTrip ?? .seconds(1)) * 2)
        return currentAhead(at: now) && (lastAheadAt.map { now - $0 >= interval } ?? true)
    }

    /// The link failed: when it returns, what has piled up since is a backfill of its own, and
    /// the current position's wait counts from then.
    mutating func linkFailed() {
        since = nil
        gaveWay = false
    }
}

/// How fast a destination's backlog rounds deliver, as measured: the positions the link carries
/// within an alarm's second, so an alarm the backlog reaches that soon goes in its turn
/// (`RoundPlanner.alarmInOrderPositions`). Only rounds that carried a backlog's worth count: a
/// round of one live fix measures the round trip, not the link.
struct DeliveryPace: Sendable {
    /// Positions a second, smoothed over the last few rounds; nil: none measured yet.
    private(set) var perSecond: Double?

    /// The fewest positions a round must deliver to measure the pace.
    static let leastPositions = 32

    mutating func record(delivered: Int, elapsed: Duration) {
        let seconds = elapsed / .seconds(1)
        guard delivered >= Self.leastPositions, seconds > 0, seconds.isFinite else { return }
        let rate = Double(delivered) / seconds
        perSecond = perSecond.map { 0.7 * $0 + 0.3 * rate } ?? rate
    }

    /// The positions delivered within `window` at this pace, less the round trip's share a
    /// round's first answer waits anyway (counted as a fifth of it); 0 when not known.
    func positions(within window: Duration) -> Int {
        guard let perSecond else { return 0 }
        let count = perSecond * (window / .seconds(1)) * 0.8
        guard count.isFinite, count >= 1 else { return 0 }
        return Int(min(count, 1_000_000))
    }
}

import GeoRelayCore
import GeoRelaySpool

/// What one destination has settled ahead of the spool's commits, and the one
/// place that says what each answer settles.
///
/// Every transport (OsmAnd requests, push batches) asks the ledger what to
/// send next for a device and tells it what the server answered; the ledger
/// writes that into the `DeliveryUpdate` the spool commits, and remembers it
/// meanwhile, so the next round neither resends what was taken nor waits for
/// the commit. A crash loses only this memory: the spool then resends what was
/// in flight, which at-least-once allows.
///
/// A value type: a round works on its own copy (on the thread that runs the
/// transport) and hands it back, and the push destination plans its next batch
/// against `assuming(_:)` while the current one is on the wire.
struct DeliveryLedger: Sendable {
    let destination: String
    /// Per device, the highest seq settled (delivered, quarantined or skipped by the filter).
    private(set) var acked: [Int64: Int64] = [:]
    /// Per device, the location filter's memory as of `acked`.
    private(set) var filters: [Int64: FilterState] = [:]
    /// Positions delivered ahead of their backlog (alarms, still-alive positions, those taken out
    /// of turn) that the spool may not have recorded yet.
    private(set) var sentAhead: Set<Int64> = []
    /// The same per device, oldest first: forgotten once the device's cursor passes them. The
    /// spool's read forgets only those it lists, and one whose commit comes with the cursor's
    /// move past it is never listed: a relay running for months would keep every such seq.
    private var sentAheadOf: [Int64: [Int64]] = [:]
    /// Replayed positions settled (delivered or refused) that the spool may still list as queued.
    private(set) var replaysSettled: Set<Int64> = []
    /// Per device, the park this destination decided (until when; nil: unparked), which holds from
    /// the answer on. The spool's copy is held state, committed every `stateSyncSeconds`: read from
    /// it alone, a device the server does not know looked unparked for up to 15 s, and every round
    /// sent its window again (5,656 requests in 15 s against one Traccar answering 400).
    private(set) var parks: [Int64: Int64?] = [:]
    /// The wall time of the last plan (`RoundPlanner`): a park runs from it, the answer that
    /// parks coming within the round it planned.
    var nowMs: Int64 = 0
    /// Positions the server refused for good when sent ahead of their backlog (an alarm, a
    /// current position), with why: not sent ahead again, and quarantined in their backlog turn
    /// without a second try (a refusal is about the position, not where it stood in line). Kept
    /// only in memory: after a restart such a position is tried once more.
    private(set) var refusedAhead: [Int64: String] = [:]
    /// Devices the server has taken a position of since this ledger was made.
    private(set) var known: Set<Int64> = []

    init(destination: String, filters: [Int64: FilterState] = [:]) {
        self.destination = destination
        self.filters = filters
    }

    // MARK: - What to send

    /// The device's cursor moved past what this ledger settled; nil when nothing of it is pending.
    func pending(_ cursor: DeviceCursor) -> DeviceCursor? {
        var cursor = cursor
        cursor.ackedSeq = max(cursor.ackedSeq, acked[cursor.deviceID] ?? 0)
        if let decided = parks[cursor.deviceID] { cursor.parkedUntilMs = decided }
        return cursor.ackedSeq < cursor.lastSeq ? cursor : nil
    }

    /// The alarms to send ahead of their backlogs, and every alarm already sent ahead (which the
    /// backlog skips), from the spool's view of them and what this ledger knows since.
    mutating func alarms(_ spool: (unsent: [StoredPosition], sent: Set<Int64>)) -> (ahead: [Delivery], sent: Set<Int64>)
    {
        // Forget what the spool now records; keep what it has not committed yet.
        sentAhead.subtract(spool.sent)
        let sent = spool.sent.union(sentAhead)
        // An alarm this ledger settled in its backlog turn (the spool may not show it yet) is had.
        // One no encoder can carry waits for its backlog turn, which quarantines it.
        let ahead = spool.unsent.filter {
            !sent.contains($0.seq) && refusedAhead[$0.seq] == nil && $0.seq > acked[$0.deviceID] ?? 0
                && PositionBounds.problem(in: $0.position) == nil
        }.map { alarm in
            Delivery(
                stored: alarm, ackThrough: alarm.seq, stateAfter: filters[alarm.deviceID] ?? FilterState(), kind: .ahead
            )
        }
        return (ahead, sent)
    }

    /// Under a spent budget (`UplinkGate.Restriction`): of each device's newest pending position,
    /// those whose fix is at least `minIntervalMs` after the newest fix the server has of the
    /// device (or of which it has none), to go ahead of the backlog as an alarm does. Device time,
    /// not the relay's: deterministic from what the spool holds, so a restart sends no extra one.
    /// The filter is not asked: this is the still-alive minimum, which goes whatever it says.
    func stillAlive(_ newest: [StoredPosition], minIntervalMs: Int64, sent: Set<Int64>) -> [Delivery] {
        ahead(newest, sent: sent) { fixMs, newestSent in
            Self.stillAliveDue(fixMs: fixMs, newestSentMs: newestSent, minIntervalMs: minIntervalMs)
        }
    }

    /// Under a spent budget, of one device's positions as real-time mode tries them (each once,
    /// nothing queued): its alarms, and its newest when the still-alive minimum is due, by the
    /// same rule as `stillAlive`.
    func restricted(_ deliveries: [Delivery], minIntervalMs: Int64) -> [Delivery] {
        guard let first = deliveries.first else { return [] }
        let newestSentMs = filters[first.deviceID]?.newestSentMs
        return deliveries.enumerated().filter { index, delivery in
            delivery.stored.position.alarm != nil
                || (index == deliveries.count - 1
                    && Self.stillAliveDue(
                        fixMs: delivery.stored.position.timeMs, newestSentMs: newestSentMs, minIntervalMs: minIntervalMs
                    ))
        }.map(\.element)
    }

    /// A fix `minIntervalMs` or more after the newest the server has of its device (or the
    /// first it would have) is due as a still-alive position.
    static func stillAliveDue(fixMs: Int64, newestSentMs: Int64?, minIntervalMs: Int64) -> Bool {
        newestSentMs.map { fixMs.saturatingMinus($0) >= minIntervalMs } ?? true
    }

    /// How much fix time a device's pending positions span before it counts as behind: more
    /// than the steady state's round or two of fixes, less than any outage worth the name.
    static let behindMs: Int64 = 30_000

    /// The devices whose newest position goes ahead of their backlog, given each device's next
    /// chunk of pending positions (`full`: the chunk was cut at its limit, more waits behind it):
    /// those behind (the chunk spans `behindMs` or more of fix time, or is full) and those whose
    /// backlog is history already (the server has a newer fix of them, sent ahead: an alarm, a
    /// still-alive position). After an outage, a start-up, a budget freed or a route moved, the
    /// server then shows where every unit is now first, and the backlog fills in behind it.
    /// A backlog the filter sends nothing of (a vessel moored since) has no newest sent ahead
    /// either: the filter decided the server learns nothing new from it.
    func behind(_ next: [(positions: [StoredPosition], full: Bool)], filter: LocationFilter, alreadySent: Set<Int64>)
        -> [Int64]
    {
        next.compactMap { chunk in
            guard let first = chunk.positions.first, let last = chunk.positions.last else { return nil }
            let state = filters[first.deviceID] ?? FilterState()
            let history = state.newestSentMs.map { first.position.timeMs < $0 } ?? false
            let span = last.position.timeMs.saturatingMinus(first.position.timeMs)
            guard history || chunk.full || span >= Self.behindMs else { return nil }
            let plan = DevicePlan(
                chunk.positions, state: state, filter: filter, alreadySent: alreadySent.union(sentAhead),
                refused: refusedAhead, traccarAttributes: false)
            return plan.sends.isEmpty ? nil : first.deviceID
        }
    }

    /// Of the devices `behind` found, each one's newest position when it is newer than the newest
    /// fix the server has of it (or the server has none), to go ahead of the history still owed.
    /// A newest below the destination's accuracy level does not go ahead: the history carries
    /// what the filter takes.
    func currentAhead(_ newest: [StoredPosition], sent: Set<Int64>, filter: LocationFilter? = nil) -> [Delivery] {
        ahead(newest.filter { filter?.accurateEnough($0.position) ?? true }, sent: sent) { fixMs, newestSent in
            newestSent.map { fixMs > $0 } ?? true
        }
    }

    /// Of `newest`, what has not gone ahead yet and is `due` (its fix time against the newest
    /// the server has of its device), as deliveries ahead of the backlog.
    private func ahead(_ newest: [StoredPosition], sent: Set<Int64>, due: (Int64, Int64?) -> Bool) -> [Delivery] {
        newest.compactMap { stored in
            guard !sent.contains(stored.seq), !sentAhead.contains(stored.seq), refusedAhead[stored.seq] == nil,
                PositionBounds.problem(in: stored.position) == nil
            else { return nil }
            let state = filters[stored.deviceID] ?? FilterState()
            guard due(stored.position.timeMs, state.newestSentMs) else { return nil }
            return Delivery(stored: stored, ackThrough: stored.seq, stateAfter: state, kind: .ahead)
        }
    }

    /// The replays to send from the spool's queue: those this ledger has not settled since the
    /// spool last listed them. Without this, a round that reads the queue before the previous
    /// round's answers are committed sends them again.
    mutating func replays(_ queued: [StoredPosition]) -> [Delivery] {
        // What the spool no longer lists it has recorded: forget it.
        replaysSettled.formIntersection(queued.map(\.seq))
        return queued.filter { !replaysSettled.contains($0.seq) }.map(Delivery.replay)
    }

    /// Runs the location filter over a device's next positions, in order, and returns what to
    /// send. Positions it skips before the first one to send are settled at once, into `update`.
    ///
    /// - Parameters:
    ///   - alreadySent: what this destination had ahead of the backlog (as the spool shows it;
    ///     what this ledger sent ahead since is added); skipped here.
    ///   - traccarAttributes: add `motion` and `archive` as Traccar reads them (`DevicePlan`).
    mutating func plan(
        _ positions: [StoredPosition], filter: LocationFilter, alreadySent: Set<Int64>,
        traccarAttributes: Bool, into update: inout DeliveryUpdate
    ) -> [Delivery] {
        guard let deviceID = positions.first?.deviceID else { return [] }
        let plan = DevicePlan(
            positions, state: filters[deviceID] ?? FilterState(), filter: filter,
            alreadySent: alreadySent.union(sentAhead), refused: refusedAhead, traccarAttributes: traccarAttributes)
        if let leading = plan.leading {
            settle(deviceID, through: leading.ackThrough, state: leading.state, into: &update)
        }
        // Recorded now and again at each plan until the cursor passes them (the spool's insert
        // replaces): the cursor moves over them only with the send before them, if any.
        update.quarantinedUnreached += plan.unsendable
        return plan.sends
    }

    /// How many requests a device may have on the wire at once before the server has shown it
    /// knows the device (a pipelined window is answered only after it is all sent): one after a
    /// park ran out, three for a device not yet taken since start, else no bound. A device the
    /// server does not know then costs at most that many requests a park period, not a window
    /// of 128 (the park holds from the first answer, but what is already on the wire is spent).
    func window(for deviceID: Int64) -> Int? {
        if known.contains(deviceID) { return nil }
        if case .some(.some) = parks[deviceID] { return 1 }
        return 3
    }

    // MARK: - What an answer settles

    /// The server has it.
    mutating func delivered(_ delivery: Delivery, into update: inout DeliveryUpdate) {
        update.sent += 1
        if let newest = filters[delivery.deviceID]?.newestSentMs, delivery.stored.position.timeMs < newest {
            update.behindNewer += 1
        }
        known.insert(delivery.deviceID)
        switch delivery.kind {
        case .replay:
            update.replayed.append(delivery.stored.seq)
            replaysSettled.insert(delivery.stored.seq)
        case .ahead:
            update.sentAhead.append(delivery.stored.seq)
            rememberAhead(delivery.stored.seq, of: delivery.deviceID)
            // Traccar computes distance and engine hours against a device's latest position,
            // so what the server now has as newest makes the older backlog history (`archive`).
            var state = filters[delivery.deviceID] ?? FilterState()
            state.markNewest(delivery.stored.position)
            filters[delivery.deviceID] = state
            update.filterStates.append((delivery.deviceID, state))
        case .backlog:
            settle(delivery.deviceID, through: delivery.ackThrough, state: delivery.stateAfter, into: &update)
        }
    }

    /// The server has it, but a position of its device before it has still to be delivered (it
    /// got no answer, or a 503, and goes again): the cursor cannot pass that one, so this settles
    /// as sent ahead of its backlog, as an alarm does, and the backlog skips it when it gets there.
    /// Sending it again would cost the link its bytes twice and give the server a duplicate.
    mutating func deliveredOutOfTurn(_ delivery: Delivery, into update: inout DeliveryUpdate) {
        var delivery = delivery
        if delivery.kind == .backlog { delivery.kind = .ahead }
        delivered(delivery, into: &update)
    }

    /// The server refused it for good. A backlog position is quarantined (kept, counted, never
    /// retried automatically) and its device goes on; a replayed one leaves the replay queue; a
    /// position refused ahead of its backlog (an alarm, a current one) is quarantined when its
    /// turn in the backlog comes (`refusedAhead`), where the cursor can pass it.
    mutating func refused(_ delivery: Delivery, reason: String, logger: Logger, into update: inout DeliveryUpdate) {
        let (seq, device) = (delivery.stored.seq, delivery.device)
        switch delivery.kind {
        case .replay:
            logger.warning("replayed position \(seq) of \(device) refused: \(reason)")
            update.replayed.append(seq)
            replaysSettled.insert(seq)
        case .ahead:
            logger.warning(
                "\(delivery.stored.position.alarm == nil ? "position" : "alarm") \(seq) of \(device) refused ahead of its backlog: \(reason)"
            )
            refusedAhead[seq] = reason
        case .backlog:
            logger.warning("quarantined position \(seq) of \(device): \(reason)")
            update.quarantined.append((delivery.deviceID, seq, reason))
            settle(delivery.deviceID, through: delivery.ackThrough, state: delivery.stateAfter, into: &update)
        }
    }

    /// The server does not know the device: it is parked for `seconds` while the others flow.
    mutating func park(
        _ delivery: Delivery, seconds: Double, reason: String, logger: Logger, into update: inout DeliveryUpdate
    ) {
        logger.warning("parked device \(delivery.device) for \(Int(seconds)) s: \(reason)")
        let until = nowMs.saturatingPlus(CheckedNumbers.milliseconds(seconds: seconds) ?? 600_000)
        parks[delivery.deviceID] = .some(until)
        update.parked.append((delivery.deviceID, until, reason))
    }

    /// A parked device's position was taken: the server knows it again.
    mutating func unpark(_ delivery: Delivery, logger: Logger, into update: inout DeliveryUpdate) {
        parks[delivery.deviceID] = .some(nil)
        update.parked.append((delivery.deviceID, nil, nil))
        logger.notice("device \(delivery.device) is known to the server again")
    }

    /// Takes in what another copy of this ledger settled (a batch planned on the reader's thread).
    mutating func apply(_ update: DeliveryUpdate) {
        for (deviceID, seq) in update.acknowledged {
            acked[deviceID] = max(acked[deviceID] ?? 0, seq)
            forgetAhead(of: deviceID, through: seq)
        }
        for (deviceID, state) in update.filterStates { filters[deviceID] = state }
        for (deviceID, until, _) in update.parked { parks[deviceID] = .some(until) }
        sentAhead.formUnion(update.sentAhead)
    }

    /// The ledger as it will be if every one of `deliveries` is delivered: what the next batch
    /// is planned against while these are on the wire.
    func assuming(_ deliveries: some Sequence<Delivery>) -> DeliveryLedger {
        var copy = self
        var scratch = DeliveryUpdate(destination: destination)
        for delivery in deliveries { copy.delivered(delivery, into: &scratch) }
        return copy
    }

    private mutating func settle(
        _ deviceID: Int64, through seq: Int64, state: FilterState, into update: inout DeliveryUpdate
    ) {
        update.acknowledged.append((deviceID, seq))
        update.filterStates.append((deviceID, state))
        acked[deviceID] = max(acked[deviceID] ?? 0, seq)
        filters[deviceID] = state
        forgetAhead(of: deviceID, through: seq)
    }

    private mutating func rememberAhead(_ seq: Int64, of deviceID: Int64) {
        guard sentAhead.insert(seq).inserted else { return }
        var seqs = sentAheadOf[deviceID] ?? []
        seqs.append(seq)
        if seqs.count > 1, seqs[seqs.count - 2] > seq { seqs.sort() }
        sentAheadOf[deviceID] = seqs
    }

    /// What was sent ahead of `deviceID`'s cursor and is behind it now: the backlog has passed it.
    private mutating func forgetAhead(of deviceID: Int64, through seq: Int64) {
        guard let seqs = sentAheadOf[deviceID], let first = seqs.first, first <= seq else { return }
        let passed = seqs.prefix { $0 <= seq }
        sentAhead.subtract(passed)
        sentAheadOf[deviceID] = passed.count == seqs.count ? nil : Array(seqs.dropFirst(passed.count))
    }

    // MARK: - Grouping

    /// Items per device, devices in order of first appearance, each device's in its own order.
    static func byDevice<Item>(_ items: [Item], _ deviceID: (Item) -> Int64) -> [[Item]] {
        var index: [Int64: Int] = [:]
        var groups: [[Item]] = []
        for item in items {
            let id = deviceID(item)
            if let at = index[id] {
                groups[at].append(item)
            } else {
                index[id] = groups.count
                groups.append([item])
            }
        }
        return groups
    }

    static func byDevice(_ deliveries: [Delivery]) -> [[Delivery]] { byDevice(deliveries, \.deviceID) }
}

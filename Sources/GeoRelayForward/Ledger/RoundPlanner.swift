import GeoRelayCore
import GeoRelaySpool

/// Where a round's positions come from: the spool (`SpoolReader`, inside one read transaction,
/// so every statement sees the same commit), or a table in the planner's tests.
protocol PendingSource {
    func pendingDevices(destination: String) throws(SpoolError) -> [DeviceCursor]
    func pendingAlarms(destination: String) throws(SpoolError) -> (unsent: [StoredPosition], sent: Set<Int64>)
    func newest(of cursors: [DeviceCursor]) throws(SpoolError) -> [StoredPosition]
    func positions(deviceID: Int64, device: String, after seq: Int64, limit: Int) throws(SpoolError)
        -> [StoredPosition]
    func replayQueue(destination: String, limit: Int) throws(SpoolError) -> [StoredPosition]
}

extension SpoolReader: PendingSource {}

/// What a destination's next round sends, decided in one place for every transport.
///
/// Each round is one of these, the first that has something: alarms not yet sent (under a spent
/// budget, as many as the allowance leaves; while history goes first, only those the backlog
/// would not carry within a second); under a spent budget, each device's newest when its
/// still-alive minimum is due, and nothing more; each device's newest ahead of every device's
/// history when some device is behind (after an outage, a start-up, a budget freed, a route
/// moved); the oldest of each backlog the filter keeps; and when no backlog has anything, the
/// history `georelay replay` queued. The transports only frame what it returns: Traccar a batch
/// per device, push one batch across devices by size.
///
/// It decides from the ledger (what the forwarder has decided and the spool may not show yet:
/// acknowledgements, filter states, parks, refusals, what went ahead) over what one read of the
/// spool shows, so what a round sends never depends on when the spool commits.
struct RoundPlanner {
    enum Kind: Sendable, Equatable {
        /// Alarms not yet sent, ahead of their backlogs.
        case alarms
        /// A spent budget: each device's newest whose still-alive minimum is due.
        case stillAlive
        /// Devices behind: each one's newest, ahead of every device's history.
        case current
        /// The oldest of each backlog the filter keeps.
        case backlog
        /// History queued by `georelay replay`.
        case replay
    }

    struct Plan: Sendable {
        /// nil: nothing to send this round.
        var kind: Kind?
        /// Each device's in spool order (a replay's in fix-time order); devices in turn.
        var deliveries: [Delivery] = []
        /// The devices with something to send and not parked, in id order.
        var ready: [DeviceCursor] = []
        /// The ledger after planning: the filter's memory past what it skipped, replays listed.
        var ledger: DeliveryLedger
        /// Positions the filter skipped before anything to send: settled without sending.
        var settled: DeliveryUpdate
        /// A backlog read only in part: more waits behind this round.
        var more = false
        /// Some device of the turn is behind: a backlog round gives way to a live fix.
        var backfilling = false
        /// Current positions were due ahead, and every newest of the turn's devices behind is at the
        /// server already (it went ahead before a restart, or as an alarm): what they are behind
        /// is history to the server, as after a give-way (`DrainOrder.observe`).
        var currentAtServer = false
        /// The earliest a parked device may go again.
        var nextUnparkMs: Int64?
        /// The turn's last device: the next turn starts after it.
        var lastInTurn: Int64?
        /// The most positions the transport sends this round: a trial's, or `maxPositions`.
        var sendLimit = Int.max
        /// Each device's requests on the wire until the server has taken one of them (a pipelined
        /// trial's 1); nil: the ledger's window says (`DeliveryLedger.window`).
        var unproven: Int?
    }

    /// How a round is a trial, after backing off without proof that the server is back: small,
    /// and its answer decides whether full rounds follow.
    enum Trial: Sendable, Equatable {
        /// One position for each device ready (their current positions, ahead of any history).
        case perDevice
        /// As `perDevice`, except a backlog round of a pipelined transport: each device's first
        /// request, its batch going on in the same round once the server has taken it
        /// (`DeviceBatch.unproven`), so no round trip separates the trial's answer from the window.
        case perDeviceFirstRequest
        /// One batch across devices (push: about a kilobyte compressed), whatever the devices.
        case oneBatch
    }

    /// The most positions a trial carries. After the link's return a trial is the devices'
    /// current positions (one each; push: one compressed batch), so a fleet's all go in it rather
    /// than one of them ahead of the others' round; against a path that swallows it, a trial goes
    /// once per backoff ceiling or once per return of the link.
    static let trialPositions = 64

    /// A trial's positions for `devices` devices with something to send, within what a budget
    /// leaves (`fitting`): one each, at least one, at most `trialPositions`.
    static func trialPositions(devices: Int, fitting: Int) -> Int {
        max(1, min(devices, trialPositions, fitting))
    }

    var destination: String
    var filter: LocationFilter
    /// `motion` and `archive` as Traccar reads them (`DevicePlan`).
    var traccarAttributes: Bool
    var restriction: UplinkGate.Restriction?
    var allowance: AlarmAllowance
    /// Whether devices behind send their newest ahead of the backlog (`DrainOrder`; push turns it
    /// off while a window gives way to the backlog).
    var currentAhead = true
    /// How many positions the link delivers within an alarm's second (`DeliveryPace`): while the
    /// history goes first, an alarm this round carries within as many goes in its turn, not ahead
    /// of its history. 0: alarms go ahead (the pace is not known, or history does not go first).
    var alarmInOrderPositions = 0
    /// The most positions the round may carry (a budget's remainder).
    var maxPositions = Int.max
    /// The round is a trial (`Trial`); nil: a full round.
    var trial: Trial? = nil
    /// The most positions read of the backlogs in one round, whatever the filter keeps.
    var readBound: Int
    /// Devices a backlog round serves, in turn after `turnAfter`; nil: all of them.
    var devicesPerTurn: Int?
    var turnAfter: Int64 = 0
    /// How long a park lasts: a deadline further ahead means the wall clock went back.
    var parkSeconds: Double
    var nowMs: Int64

    /// The round, and what it may send: a trial's size is decided here, for every transport.
    func plan(ledger: DeliveryLedger, source: some PendingSource) throws(SpoolError) -> Plan {
        var planner = self
        if trial == .oneBatch { planner.maxPositions = Self.trialPositions(devices: .max, fitting: maxPositions) }
        var plan = try planner.planRound(ledger: ledger, source: source)
        switch trial {
        case nil, .oneBatch?:
            plan.sendLimit = planner.maxPositions
        case .perDeviceFirstRequest? where plan.kind == .backlog:
            plan.sendLimit = maxPositions
            plan.unproven = 1
        case .perDevice?, .perDeviceFirstRequest?:
            plan.sendLimit = Self.trialPositions(devices: plan.ready.count, fitting: maxPositions)
        }
        return plan
    }

    private func planRound(ledger initial: DeliveryLedger, source: some PendingSource) throws(SpoolError) -> Plan {
        var ledger = initial
        ledger.nowMs = nowMs
        // The devices first: the alarms, read after, then see every position these do (in a
        // reader without one transaction, the other order could find an alarm's device pending
        // but not the alarm, and send it in its turn instead of ahead).
        let cursors = try source.pendingDevices(destination: destination).compactMap(ledger.pending)
        let alarms = ledger.alarms(try source.pendingAlarms(destination: destination))
        var plan = Plan(ledger: ledger, settled: DeliveryUpdate(destination: destination))
        (plan.ready, plan.nextUnparkMs) = ready(cursors)
        let readyIDs = Set(plan.ready.map(\.deviceID))
        let readyAlarms = alarms.ahead.filter { readyIDs.contains($0.deviceID) }
        func ahead(_ kind: Kind, _ deliveries: [Delivery]) -> Plan {
            guard !deliveries.isEmpty else { return plan }
            plan.kind = kind
            plan.deliveries = Array(deliveries.prefix(maxPositions))
            if traccarAttributes, kind != .backlog, kind != .replay {
                plan.deliveries = plan.deliveries.map(DevicePlan.aheadWithDistance)
            }
            return plan
        }

        if let restriction {
            // At most so many alarms a device an hour; the rest wait as history.
            let allowed = allowance.take(readyAlarms, perDeviceHour: restriction.maxAlarmsPerDeviceHour, nowMs: nowMs)
            if !allowed.isEmpty { return ahead(.alarms, allowed) }
            return ahead(
                .stillAlive,
                ledger.stillAlive(
                    try source.newest(of: plan.ready), minIntervalMs: restriction.minIntervalMs, sent: alarms.sent))
        }
        if !readyAlarms.isEmpty, alarmInOrderPositions == 0 || currentAhead { return ahead(.alarms, readyAlarms) }

        let turn = devicesPerTurn.map { Self.inTurn(plan.ready, after: turnAfter, count: $0) } ?? plan.ready
        // Each backlog as far as the round needs (a few dozen positions of each of forty, or
        // thousands of a lone device's behind the filter), at most `readBound` in all.
        let backlogs = try BacklogRead(
            source: source, cursors: turn, ledger: ledger, settled: plan.settled, filter: filter,
            alreadySent: alarms.sent, batch: min(maxPositions, readBound), bound: readBound,
            traccarAttributes: traccarAttributes)
        if !readyAlarms.isEmpty {
            // In its turn when this round carries it within what the link delivers in a second:
            // ahead of its history, that history would be older than the server's newest, and
            // Traccar's event handlers would skip all of it (`DrainOrder`).
            let soon = Set(
                backlogs.candidates.sorted { $0.stored.seq < $1.stored.seq }
                    .prefix(alarmInOrderPositions).map(\.stored.seq))
            if !readyAlarms.allSatisfy({ soon.contains($0.stored.seq) }) { return ahead(.alarms, readyAlarms) }
        }
        // Judged against the ledger before the plan moved the filter's memory past what it skips.
        let behind = Set(ledger.behind(backlogs.chunks, filter: filter, alreadySent: alarms.sent))
        plan.backfilling = !behind.isEmpty
        if currentAhead, !behind.isEmpty {
            let current = ledger.currentAhead(
                try source.newest(of: turn.filter { behind.contains($0.deviceID) }), sent: alarms.sent, filter: filter)
            if !current.isEmpty { return ahead(.current, current) }
            plan.currentAtServer = true
        }
        ledger = backlogs.ledger
        plan.settled = backlogs.settled
        if backlogs.candidates.isEmpty, plan.settled.isEmpty {
            // Nothing live waits: the replays, which this ledger may have settled since the spool listed them.
            let replays = ledger.replays(
                try source.replayQueue(destination: destination, limit: min(maxPositions, readBound)))
            plan.ledger = ledger
            return ahead(.replay, replays)
        }
        plan.ledger = ledger
        plan.more = backlogs.more
        plan.lastInTurn = turn.last?.deviceID
        return ahead(.backlog, backlogs.candidates)
    }

    /// The devices not parked, and when the first parked one may go. A deadline more than one
    /// park period ahead means the wall clock went back (NTP catching up after a cold start): the
    /// device is tried now rather than sitting parked for however far the clock jumped.
    private func ready(_ cursors: [DeviceCursor]) -> ([DeviceCursor], Int64?) {
        let longest = CheckedNumbers.milliseconds(seconds: parkSeconds) ?? 0
        var ready: [DeviceCursor] = []
        var nextUnpark: Int64?
        for cursor in cursors {
            if let until = cursor.parkedUntilMs, until > nowMs, until <= nowMs.saturatingPlus(longest) {
                nextUnpark = min(nextUnpark ?? .max, until)
            } else {
                ready.append(cursor)
            }
        }
        return (ready, nextUnpark)
    }

    /// Up to `count` devices (in id order), starting after the device `after`, wrapping round:
    /// with more devices than a round serves, every device is served in turn.
    static func inTurn(_ ready: [DeviceCursor], after: Int64, count: Int) -> [DeviceCursor] {
        let split = ready.firstIndex { $0.deviceID > after } ?? ready.endIndex
        return Array((ready[split...] + ready[..<split]).prefix(count))
    }
}

extension RoundPlanner {
    /// Real time (`buffer: false`): what goes of the positions just committed, each tried once.
    /// Per device in order through the filter; over an uplink whose budget is spent, only alarms
    /// and the newest when its still-alive minimum is due (`DeliveryLedger.restricted`, the rule
    /// the buffered still-alive round keeps). The ledger moves on as if every position tried were
    /// sent; nothing queues, so what the filter skips is settled nowhere.
    /// - Returns: a batch per device with something to try, and how many positions they hold.
    static func realTime(
        _ positions: [StoredPosition], ledger: inout DeliveryLedger, filter: LocationFilter,
        restriction: UplinkGate.Restriction?
    ) -> (batches: [DeviceBatch], attempted: Int) {
        var batches: [DeviceBatch] = []
        var attempted = 0
        var untracked = DeliveryUpdate(destination: ledger.destination)
        for stored in DeliveryLedger.byDevice(positions, \.deviceID) {
            var deliveries = ledger.plan(
                stored, filter: filter, alreadySent: [], traccarAttributes: true, into: &untracked)
            if let restriction {
                deliveries = ledger.restricted(deliveries, minIntervalMs: restriction.minIntervalMs)
            }
            ledger = ledger.assuming(deliveries)
            attempted += deliveries.count
            guard !deliveries.isEmpty else { continue }
            batches.append(DeviceBatch(untracked: deliveries))
        }
        return (batches, attempted)
    }
}

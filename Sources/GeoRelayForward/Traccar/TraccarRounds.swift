import GeoRelayCore
import GeoRelaySpool

/// A Traccar destination's rounds behind its loop (`DestinationLoop`): each planned by
/// `RoundPlanner` from the ledger and one read of the spool, and sent a batch per device by the
/// forwarder's engine (OsmAnd or Teltonika).
///
/// Used by the loop's task alone.
final class TraccarRounds: DestinationRounds {
    private let forwarder: TraccarForwarder
    private var ledger: DeliveryLedger
    /// Alarms committed during a round end it, so they go ahead of the rest.
    private let alarms: WakeSignal
    /// Live fixes committed during a backfill's round end it or join it (`DrainOrder.LiveEdge`).
    private let positions: WakeSignal
    /// The last device of the previous round: the next round starts after it, so with more
    /// devices than fit in a round every device is served in turn, not the first 64 until done.
    private var rotation: Int64 = 0
    /// After a round of current positions, the next is history: with live fixes arriving faster
    /// than rounds, current positions at every turn would starve the backfill.
    private var historyNext = false
    private var pace = DeliveryPace()
    /// The link failed since the last round: its kept connections are not to be trusted.
    private var connectionsStale = false
    /// The live edge of a backfill over pipelined OsmAnd: live fixes join its rounds.
    private let live = LiveJoin()

    init(_ forwarder: TraccarForwarder, ledger: DeliveryLedger, alarms: WakeSignal, positions: WakeSignal) {
        self.forwarder = forwarder
        self.ledger = ledger
        self.alarms = alarms
        self.positions = positions
    }

    func routeMoved() async {
        await forwarder.engine.run { $0.closeConnections() }
    }

    /// The current positions did not get through: they go first again, on new connections (a
    /// terminal that dropped everything while down leaves kept ones that look open and carry
    /// nothing, each a request timeout lost).
    func linkFailed() {
        historyNext = false
        live.reset()
        connectionsStale = true
    }

    func round(_ turn: DestinationLoop.Turn, order: inout DrainOrder) async -> DestinationLoop.Report {
        let f = forwarder
        if connectionsStale {
            connectionsStale = false
            await f.engine.run { $0.closeConnections() }
        }
        let nowMs = f.clock.nowMs()
        let now = f.clock.now()
        // Over a budgeted uplink, no more on the wire than what is left of the budget pays for.
        let fitting = f.recorder.positionsFitting()
        let planner = RoundPlanner(
            destination: f.settings.name, filter: f.filter, traccarAttributes: true, restriction: turn.restriction,
            allowance: f.alarmAllowance, currentAhead: !historyNext && order.currentAhead(at: now),
            alarmInOrderPositions: pace.positions(within: .seconds(1)), maxPositions: fitting,
            trial: turn.trial ? (f.osmAnd ? .perDeviceFirstRequest : .perDevice) : nil,
            readBound: TraccarForwarder.positionsPerRound, devicesPerTurn: TraccarForwarder.devicesPerRound,
            turnAfter: rotation, parkSeconds: f.settings.parkSeconds, nowMs: nowMs)
        let plan: RoundPlanner.Plan
        do {
            plan = try await f.reader.run { [ledger] reader in
                try reader.snapshot { reader throws(SpoolError) in try planner.plan(ledger: ledger, source: reader) }
            }
        } catch {
            f.logger.error("cannot read the spool: \(error)")
            return .idle(.seconds(5))
        }
        ledger = plan.ledger
        f.recorder.record(plan.settled)
        order.observe(plan.kind, backfilling: plan.backfilling, currentAtServer: plan.currentAtServer, at: now)
        // A trial's size is the planner's (`RoundPlanner.Trial`).
        let maxPositions = plan.sendLimit
        historyNext = plan.kind == .current
        let results: [DeviceResult]
        switch plan.kind {
        case nil:
            // Positions the filter skipped were settled: plan again at once.
            if !plan.settled.isEmpty { return .again }
            // A replay queued by another process is noticed within half a minute.
            let untilUnpark = plan.nextUnparkMs.map { Duration.milliseconds(max(1, $0 - nowMs)) }
            return .idle(min(untilUnpark ?? .seconds(30), .seconds(30)))
        case .alarms?, .stillAlive?, .current?:
            let started = f.clock.now()
            results = await f.send(
                TraccarForwarder.batches(plan.deliveries, cursors: plan.ready), mode: .buffered, ledger: &ledger,
                maxPositions: maxPositions)
            if plan.kind == .current { order.currentRoundTook(f.clock.now() - started) }
        case .replay?:
            results = await f.send(
                TraccarForwarder.replayBatches(plan.deliveries), mode: .buffered, ledger: &ledger,
                maxPositions: maxPositions)
        case .backlog?:
            rotation = plan.lastInTurn ?? rotation
            let started = f.clock.now()
            // Live fixes join a round only over pipelined OsmAnd, and not into a trial's or a
            // budget's bounded one.
            let edge = order.liveEdge(
                at: now, backfilling: plan.backfilling, joinable: f.osmAnd && !turn.trial && maxPositions == .max)
            if !plan.backfilling { live.reset() }
            // After a round the live fixes joined, the next is history again: the joins' filter
            // decided what went, not a round of every newest.
            historyNext = edge == .join
            results = await f.send(
                f.backlogBatches(plan, ledger: ledger), mode: .buffered, ledger: &ledger, alarms: alarms,
                live: TraccarForwarder.LiveFixes(edge: edge, commits: positions, join: live),
                historyLeft: order.historyLeft(at: now), maxPositions: maxPositions)
            pace.record(delivered: results.reduce(0) { $0 + $1.delivered }, elapsed: f.clock.now() - started)
        }
        if let failure = results.lazy.compactMap(\.unavailable).first,
            case .unavailable(let reason, let retryAfter, let transport) = failure
        {
            return .unavailable(reason: reason, retryAfter: retryAfter, transport: transport)
        }
        return .answered(delivered: results.reduce(0) { $0 + $1.delivered })
    }
}

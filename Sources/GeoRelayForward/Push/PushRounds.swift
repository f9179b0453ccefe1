import GeoRelayCore
import GeoRelaySpool

/// A push destination's rounds behind its loop (`DestinationLoop`): a batch planned by
/// `RoundPlanner` and, when it is a full one of the backlog, a window of them on one connection
/// (`PushForwarder.sendWindow`), after the token they go with.
///
/// Used by the loop's task alone.
final class PushRounds: DestinationRounds {
    private let forwarder: PushForwarder
    /// The encoding and batch size the gateway's answers have left us with, and the compression planner.
    private var state: PushForwarder.DeliveryState
    private var ledger: DeliveryLedger
    /// How many batches the link takes at once, from its measured round trip.
    private var depth: PipelineDepth

    init(_ forwarder: PushForwarder, state: PushForwarder.DeliveryState, ledger: DeliveryLedger) {
        self.forwarder = forwarder
        self.state = state
        self.ledger = ledger
        depth = PipelineDepth(ceiling: forwarder.push.batchInFlight)
    }

    /// New connections for batches and logins (probes: the link's own), so the answers to the
    /// backlog do not come back over the uplink the old ones left by.
    func routeMoved() async {
        depth.reset()
        await forwarder.transport.reset()
        await forwarder.auth.forgetConnections()
    }

    /// The path may not be the one that comes back: its round trip is measured anew.
    func linkFailed() {
        depth.reset()
    }

    func round(_ turn: DestinationLoop.Turn, order: inout DrainOrder) async -> DestinationLoop.Report {
        let f = forwarder
        let name = f.settings.name
        let prepared: PushForwarder.Prepared
        let planned = f.clock.now()
        do {
            // Over a budgeted uplink, no bigger a batch than what is left of the budget pays for.
            let fitting = f.recorder.positionsFitting()
            prepared = try await f.prepare(
                ledger: ledger, state: state, maxPositions: fitting == .max ? nil : fitting,
                restriction: turn.restriction, currentAhead: order.currentAhead(at: planned), trial: turn.trial)
        } catch {
            f.logger.error("cannot read the spool: \(error)")
            return .idle(.seconds(5))
        }
        order.observe(prepared.kind, backfilling: prepared.backfilling, at: planned)
        // Positions the filter skipped before anything to send are settled now.
        if !prepared.settled.isEmpty {
            f.recorder.record(prepared.settled)
            ledger.apply(prepared.settled)
        }
        // A replay queued by another process is noticed within half a minute.
        guard !prepared.items.isEmpty else { return prepared.settled.isEmpty ? .idle(.seconds(30)) : .again }
        if let waitMs = f.waitMs(before: prepared) { return .idle(.milliseconds(waitMs)) }
        let token: String
        do {
            token = try await f.auth.token()
        } catch {
            return report(error)
        }
        // Full batches go several at a time on one connection; a trial, a budget's remainder or
        // a replay alone.
        let backlog =
            prepared.full && !turn.trial && turn.restriction == nil && f.gate?.bytesLeft(for: name) == nil
            && !prepared.items.contains { $0.delivery.kind == .replay }
        let (result, newState) = await f.sendWindow(
            prepared, token: token, state: state, ledger: &ledger, depth: &depth, order: &order,
            refill: backlog ? f.gate?.routeGeneration(for: name) ?? 0 : nil)
        state = newState
        switch result.stop {
        case .none: return .answered(delivered: result.delivered)
        case .auth(let error): return report(error)
        case .unavailable(let reason, let retryAfter, let transport):
            return .unavailable(reason: reason, retryAfter: retryAfter, transport: transport)
        }
    }

    /// No usable token: login mode retries with backoff; token mode waits for a new token.
    private func report(_ error: PushAuthError) -> DestinationLoop.Report {
        switch error {
        case .unavailable(_, let retryAfter, let transport):
            .unavailable(reason: error.description, retryAfter: retryAfter, transport: transport)
        case .rejected(let reason):
            .refused(
                reason: reason,
                seconds: forwarder.push.authMode == .token ? forwarder.settings.probeIntervalSeconds : nil)
        }
    }
}

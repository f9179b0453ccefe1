import GeoRelayCore
import GeoRelaySpool

/// A push destination's rounds behind its loop (`DestinationLoop`): a batch planned by
/// `RoundPlanner` and sent by the engine's round (`PushRound`), which asks this side for what only
/// the forwarder's task can give: the backlog's next batch, bodies in another encoding, a token.
///
/// Used by the loop's task alone.
final class PushRounds: DestinationRounds {
    private let forwarder: PushForwarder
    private var ledger: DeliveryLedger
    /// The link failed since the last round: the engine measures the path anew.
    private var pathStale = false
    /// When delivery last started again (the relay's start, the first round after the link
    /// failed): what arrived before it has waited out the outage (`PushForwarder.waitMs`).
    private var heldUntilMs: Int64

    init(_ forwarder: PushForwarder, ledger: DeliveryLedger) {
        self.forwarder = forwarder
        self.ledger = ledger
        heldUntilMs = forwarder.clock.nowMs()
    }

    /// New connections for batches and logins (probes: the link's own), so the answers to the
    /// backlog do not come back over the uplink the old ones left by.
    func routeMoved() async {
        await forwarder.engine.run { $0.closeConnections() }
        await forwarder.auth.forgetConnections()
    }

    /// A token to push with, asking the auth server over the link if one is due: a wait on the
    /// link meanwhile (a simulation moves its clock through a login as through any other wait).
    private func token() async throws(PushAuthError) -> String {
        let auth = forwarder.auth
        let result: Result<String, PushAuthError> = await forwarder.link.waits {
            do throws(PushAuthError) {
                return .success(try await auth.token())
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// The path may not be the one that comes back: its round trip is measured anew.
    func linkFailed() {
        pathStale = true
    }

    func round(_ turn: DestinationLoop.Turn, order: inout DrainOrder) async -> DestinationLoop.Report {
        let f = forwarder
        let name = f.settings.name
        let stale = pathStale
        pathStale = false
        if stale { heldUntilMs = f.clock.nowMs() }
        let state = await f.engine.run { engine in
            if stale { engine.linkFailed() }
            return engine.state
        }
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
        if let waitMs = f.waitMs(before: prepared, heldUntilMs: heldUntilMs) { return .idle(.milliseconds(waitMs)) }
        let token: String
        do {
            token = try await self.token()
        } catch {
            return report(error)
        }
        // Full batches go several at a time on one connection (a trial's with one small batch
        // behind it until it is answered); a budget's remainder or a replay alone.
        let windowed =
            prepared.full && turn.restriction == nil && f.gate?.bytesLeft(for: name) == nil
            && !prepared.items.contains { $0.delivery.kind == .replay }
        let refill: PushRound.Refill = !windowed ? .none : turn.trial ? .trial(bytes: Self.behindTrialBytes) : .window
        var window = Window(
            route: f.gate?.routeGeneration(for: name) ?? 0, assumed: ledger.assuming(prepared.items.map(\.delivery)),
            currentAheadAt: prepared.carriesCurrent ? planned : nil)
        let (first, before) = (prepared.batch(settled: nil), ledger)
        await f.engine.run { $0.begin(first, token: token, ledger: before, refill: refill) }
        let yield = AbortFlag()
        let (stop, wake, recorder) = (f.shutdown.abandoned, f.wakeEngine, f.recorder)
        let (outcome, after) = await withTaskCancellationHandler {
            while let need = await f.engine.run({ $0.drive(stop: stop, yield: yield) { recorder.record($0) } }) {
                let supply = await answer(need, window: &window, order: &order)
                await f.engine.run { $0.supply(supply) }
            }
            return await f.engine.run { $0.end() }
        } onCancel: {
            yield.set()
            wake()
        }
        ledger = after
        if outcome.abandoned > 0 {
            f.logger.warning(
                "abandoned a batch of \(outcome.abandoned) positions in flight, unanswered; it goes again, so the gateway may get it twice"
            )
            f.spool.add(counters: ["forward.abandoned.\(name)": Int64(outcome.abandoned)])
        }
        switch outcome.stop {
        case .none: return .answered(delivered: outcome.delivered)
        case .auth(let error): return report(error)
        case .unavailable(let reason, let retryAfter, let transport):
            return .unavailable(reason: reason, retryAfter: retryAfter, transport: transport)
        }
    }

    /// The most a batch behind a trial may carry: about what a full batch of 500 positions
    /// compresses to (11 bytes a position), and all a gateway still down costs beyond the trial.
    static let behindTrialBytes = 8 * 1024

    /// What a round's backlog window has planned so far.
    private struct Window {
        /// The route it was planned on: a batch planned after the route moved waits for the next round.
        var route: Int
        /// The ledger as if every batch planned were delivered.
        var assumed: DeliveryLedger
        /// When current positions last went ahead in this window.
        var currentAheadAt: RelayInstant?
    }

    /// What the round asked for, from the spool, the compressor or the authenticator.
    private func answer(_ need: PushRound.Need, window: inout Window, order: inout DrainOrder) async
        -> PushRound.Supply
    {
        let f = forwarder
        switch need {
        case .batch(let maxBytes):
            return await nextBatch(maxBytes: maxBytes, window: &window, order: &order)
        case .bodies(let chunks, let encoding):
            guard !Task.isCancelled else { return .none(stop: nil) }
            let planner = await f.engine.run { $0.state.planner }
            var bodies: [PushRound.Encoded] = []
            do {
                for chunk in chunks { bodies.append(try await f.encode(chunk, encoding: encoding, planner: planner)) }
            } catch {
                return .none(stop: .unavailable("cannot compress a batch: \(error)", retryAfter: nil, transport: false))
            }
            return .bodies(bodies)
        case .token(let refused):
            await f.auth.invalidate(refused)
            do {
                return .token(try await token())
            } catch {
                return .none(stop: .auth(error))
            }
        }
    }

    /// The backlog's next batch, planned as if every batch before it were delivered, while the
    /// route and the budget are as they were: a full one, or the backlog's last when it would go
    /// now anyway (its oldest position waited `batch.maxDelaySeconds`), so the end of a drain
    /// costs no round trip of its own; a batch still filling waits for the next round. Live fixes ride in the window, small as they
    /// are, only every so often (`DrainOrder.currentDue`): with many units one arrives every few
    /// hundred milliseconds, and each batch of them costs a read of every device's backlog and a
    /// request. A replay waits for a round of its own.
    private func nextBatch(maxBytes: Int?, window: inout Window, order: inout DrainOrder) async
        -> PushRound.Supply
    {
        let f = forwarder
        let name = f.settings.name
        let (state, roundTrip) = await f.engine.run { ($0.state, $0.roundTrip) }
        let currentDue = order.currentDue(at: f.clock.now(), lastAheadAt: window.currentAheadAt, roundTrip: roundTrip)
        guard !Task.isCancelled, f.gate?.restriction(for: name) == nil, f.gate?.bytesLeft(for: name) == nil,
            (f.gate?.routeGeneration(for: name) ?? 0) == window.route,
            let next = try? await f.prepare(ledger: window.assumed, state: state, currentAhead: currentDue),
            !next.items.isEmpty,
            next.full || next.kind == .current || f.waitMs(before: next, heldUntilMs: heldUntilMs) == nil,
            next.items.count <= state.maxPositions, next.body.count <= maxBytes ?? .max,
            !next.items.contains(where: { $0.delivery.kind == .replay }),
            // A window that outlasts the token's refresh point (a long backlog over a slow link)
            // sends its next batches with the new token, not the old one to its expiry.
            let token = try? await token()
        else { return .none(stop: nil) }
        let now = f.clock.now()
        order.observe(next.kind, backfilling: next.backfilling, at: now)
        window.assumed.apply(next.settled)
        window.assumed = window.assumed.assuming(next.items.map(\.delivery))
        if next.carriesCurrent { window.currentAheadAt = now }
        return .batch(next.batch(settled: next.settled), token: token)
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

extension PushForwarder.Prepared {
    /// Carries current positions sent ahead of their backlog (not alarms).
    var carriesCurrent: Bool {
        items.contains { $0.delivery.kind == .ahead && $0.delivery.stored.position.alarm == nil }
    }

    /// As the round sends it; `settled` goes in its turn.
    func batch(settled: DeliveryUpdate?) -> PushRound.Batch {
        PushRound.Batch(
            items: items, body: body, encoding: encoding, compression: compression, settled: settled, full: full,
            ahead: items.contains { $0.delivery.kind == .ahead })
    }
}

import GeoRelayCore
import GeoRelaySpool
import Glibc

/// Delivers the spool to a tracking-push endpoint in compressed batches.
///
/// A batch is the oldest pending positions across devices (each device's in
/// spool order), closed at `batch.maxPositions`, `batch.maxBytes` of JSON, or
/// `batch.maxDelaySeconds` after its oldest position arrived; a backlog goes
/// out in full batches. 2xx acknowledges the batch; 401 gets a fresh token and
/// retries once; 413 halves the batch size; 400/422 halves the batch until the
/// refused positions stand alone and are quarantined; 415 falls back to the next
/// weaker encoding (remembered); the rest backs off like every destination.
package final class PushForwarder: DestinationForwarder {
    let settings: Configuration.DestinationSettings
    let push: PushSettings
    let spool: Spool
    let logger: Logger
    let link: DestinationLink
    let wire: PushProtocol
    let transport: PushTransport
    private let reader: QueueConfined<SpoolReader>
    let encoder: QueueConfined<ZstdCompressor>
    private let filter: LocationFilter
    package let auth: PushAuthenticator
    let shutdown = ForwarderShutdown()
    /// Where a spent uplink budget restricts what goes; nil without uplinks.
    let gate: UplinkGate?
    /// Alarms per device and hour over a restricted uplink.
    private let alarmAllowance = AlarmAllowance()
    /// Every hand-over's bill, record and spend (batches, probes, logins).
    let recorder: DeliveryRecorder

    package init(
        settings: Configuration.DestinationSettings, spool: Spool, logger: Logger, gate: UplinkGate? = nil,
        now: @escaping @Sendable () -> Int64 = WallClock.steadyMs, clock: any RelayClock = SystemClock()
    ) throws {
        self.settings = settings
        self.gate = gate
        self.push = settings.push ?? PushSettings()
        self.spool = spool
        self.logger = logger.with(label: "forward[\(settings.name)]")
        let meter = WireMeter()
        recorder = DeliveryRecorder(destination: settings.name, spool: spool, meter: meter, gate: gate, clock: clock)
        self.link = try DestinationLink(
            settings: settings, recorder: recorder, logger: self.logger, linkChanges: gate?.linkChanges, clock: clock)
        self.wire = PushProtocol(settings: settings)
        self.transport = try PushTransport(settings: settings, meter: meter, logger: self.logger)
        self.reader = QueueConfined(label: "georelay.reader.\(settings.name)", try spool.makeReader())
        self.encoder = QueueConfined(label: "georelay.encode.\(settings.name)", try ZstdCompressor())
        self.filter = LocationFilter(settings: settings.filter)
        self.auth = PushAuthenticator(
            settings: settings, store: TokenStore(spoolPath: spool.path, destination: settings.name),
            worker: try HTTPWorker(label: "georelay.auth.\(settings.name)", tls: settings.tls, meter: meter),
            logger: self.logger, now: now)
    }

    /// A delivery with its JSON point, encoded once.
    struct Item: Sendable {
        var delivery: Delivery
        var point: [UInt8]
    }

    package func run() async {
        await shutdown.run { await self.deliver() }
    }

    package func finish() { shutdown.finish() }
    package func abandon() { shutdown.abandon() }

    /// The delivery loop, until the task is cancelled.
    private func deliver() async {
        let wake = spool.commits.subscribe()
        gate?.watch(wake)
        defer {
            gate?.unwatch(wake)
            spool.commits.unsubscribe(wake)
        }
        await gate?.firstLook()
        var state = DeliveryState(
            encoding: push.compression, maxPositions: push.batchMaxPositions,
            planner: CompressionPlanner(fixedLevel: push.zstdLevel))
        let name = settings.name
        if let stored = try? await reader.run({ try $0.encoding(destination: name) }),
            let remembered = PushSettings.Compression(rawValue: stored), remembered.strength < push.compression.strength
        {
            state.encoding = remembered
        }
        var ledger = DeliveryLedger(
            destination: name, filters: (try? await reader.run { try $0.filterStates(destination: name) }) ?? [:])
        var backoff = Backoff(minSeconds: settings.backoffMinSeconds, maxSeconds: settings.backoffMaxSeconds)
        if !settings.buffer {
            logger.warning("buffer: false is not supported for push destinations; positions queue as usual")
        }
        /// After backing off without proof that the gateway is back: the next batch holds one position.
        var trial = false
        var budget = BudgetNotice()
        var route = gate?.routeGeneration(for: name) ?? 0
        var depth = PipelineDepth(ceiling: push.batchInFlight)
        var order = DrainOrder(setting: settings.order, currentWithinSeconds: settings.currentWithinSeconds)
        while !Task.isCancelled {
            // The route moved: new connections (batches, logins, probes), so the answers to the
            // backlog do not come back over the uplink the old ones left by.
            if let moved = gate?.routeGeneration(for: name), moved != route {
                route = moved
                depth.reset()
                await transport.reset()
                await auth.forgetConnections()
                await link.forgetConnections()
                logger.info("the route moved: new connections from here on")
            }
            let restriction = gate?.restriction(for: name)
            if let restriction {
                budget.restricted(restriction, recorder: recorder, logger: logger)
            } else {
                budget.lifted(recorder: recorder, logger: logger)
            }
            let prepared: Prepared
            let planned = ContinuousClock.now
            do {
                // Over a budgeted uplink, no bigger a batch than what is left of the budget pays for.
                let fitting = recorder.positionsFitting()
                // Push's trial is one compressed batch: up to the most a trial carries, whatever the devices.
                let limit = trial ? DestinationLink.trialPositions(devices: .max, fitting: fitting) : fitting
                prepared = try await prepare(
                    ledger: ledger, state: state, maxPositions: limit == .max ? nil : limit, restriction: restriction,
                    currentAhead: order.currentAhead(at: planned))
            } catch {
                logger.error("cannot read the spool: \(error)")
                try? await Task.sleep(for: .seconds(5))
                continue
            }
            order.observe(prepared.kind, backfilling: prepared.backfilling, at: planned)
            // Positions the filter skipped before anything to send are settled now.
            if !prepared.settled.isEmpty {
                spool.record(prepared.settled)
                ledger.apply(prepared.settled)
            }
            guard !prepared.items.isEmpty else {
                // A replay queued by another process is noticed within half a minute.
                if prepared.settled.isEmpty { await wake.wait(timeout: .seconds(30)) }
                continue
            }
            if let waitMs = waitMs(before: prepared) {
                await wake.wait(timeout: .milliseconds(waitMs))
                continue
            }
            let token: String
            do {
                token = try await auth.token()
            } catch {
                trial = await handleAuth(error, backoff: &backoff) == .trial
                continue
            }
            // Full batches go several at a time on one connection; a trial, a budget's remainder or
            // a replay alone.
            let backlog =
                prepared.full && !trial && restriction == nil && gate?.bytesLeft(for: name) == nil
                && !prepared.items.contains { $0.delivery.kind == .replay }
            let (result, newState) = await sendWindow(
                prepared, token: token, state: state, ledger: &ledger, depth: &depth, order: &order,
                refill: backlog ? route : nil)
            state = newState
            if Task.isCancelled { break }
            switch result.stop {
            case .none:
                trial = false
                backoff.reset()
                if restriction != nil { budget.delivered() }
            case .auth(let error):
                trial = await handleAuth(error, backoff: &backoff) == .trial
            case .unavailable(let reason, let retryAfter, let transport):
                // The path may not be the one that comes back: its round trip is measured anew.
                depth.reset()
                order.linkFailed()
                trial =
                    await link.backOff(reason: reason, retryAfter: retryAfter, transport: transport, backoff: &backoff)
                    == .trial
            }
        }
    }

    /// How long a batch that is not full waits: at most `batch.maxDelaySeconds` after its oldest
    /// position arrived; nil when it goes now.
    func waitMs(before prepared: Prepared) -> Int64? {
        guard !prepared.full, let oldest = prepared.items.map(\.delivery.stored.receivedMs).min() else { return nil }
        let maxDelayMs = CheckedNumbers.milliseconds(seconds: push.batchMaxDelaySeconds) ?? 0
        let due = oldest + maxDelayMs
        let nowMs = WallClock.nowMs()
        // Further away than the delay itself: the wall clock was set back since the position
        // arrived; send now rather than wait for the clock to catch up.
        guard due > nowMs, due - nowMs <= maxDelayMs else { return nil }
        return due - nowMs
    }

    /// A batch ready to send: its positions and, when it goes as one request, its body.
    struct Prepared: Sendable {
        var items: [Item]
        var full: Bool
        /// Skipped positions settled without sending (recorded when the batch is used).
        var settled: DeliveryUpdate
        var encoding: PushSettings.Compression
        var body: [UInt8]
        var compression: CompressionMeasurement?
        /// What the planner made of the round, and whether some device was behind (`DrainOrder`).
        var kind: RoundPlanner.Kind? = nil
        var backfilling = false
    }

    /// What one zstd compression cost, for the planner.
    struct CompressionMeasurement: Sendable {
        var level: Int
        var jsonBytes: Int
        var compressedBytes: Int
        var seconds: Double
        /// Reading and planning the batch from the spool, before it was compressed.
        var planningSeconds: Double?
    }

    /// - Parameters:
    ///   - maxPositions: a smaller batch than the state's (a trial after backing off).
    ///   - currentAhead: whether devices behind send their newest position ahead of the backlog
    ///     (false while a window gives way to the backlog: see `sendWindow`).
    func prepare(
        ledger: DeliveryLedger, state: DeliveryState, maxPositions: Int? = nil,
        restriction: UplinkGate.Restriction? = nil, currentAhead: Bool = true
    ) async throws -> Prepared {
        let started = WallClock.monotonicNs()
        let (items, full, settled, plan) = try await nextBatch(
            ledger: ledger, maxPositions: min(state.maxPositions, maxPositions ?? .max),
            restriction: restriction, currentAhead: currentAhead)
        guard !items.isEmpty else {
            return Prepared(
                items: [], full: false, settled: settled, encoding: state.encoding, body: [], kind: plan.kind,
                backfilling: plan.backfilling)
        }
        let planning = Double(WallClock.monotonicNs() - started) / 1e9
        var encoded = try await encode(items[...], encoding: state.encoding, planner: state.planner)
        encoded.measurement?.planningSeconds = planning
        return Prepared(
            items: items, full: full, settled: settled, encoding: state.encoding, body: encoded.body,
            compression: encoded.measurement, kind: plan.kind, backfilling: plan.backfilling)
    }

    /// What the forwarder keeps between batches.
    struct DeliveryState: Sendable {
        var encoding: PushSettings.Compression
        /// Lowered by 413 answers.
        var maxPositions: Int
        var planner: CompressionPlanner
    }

    /// The next batch, of the round `RoundPlanner` plans from one read of the spool: what goes
    /// ahead of the backlog (or a replay) as a batch of its own; a backlog as the oldest pending
    /// positions the filter keeps across devices, each device's part a prefix of its own
    /// backlog, closed by count or bytes.
    private func nextBatch(
        ledger initial: DeliveryLedger, maxPositions: Int, restriction: UplinkGate.Restriction?,
        currentAhead: Bool
    ) async throws -> ([Item], Bool, DeliveryUpdate, (kind: RoundPlanner.Kind?, backfilling: Bool)) {
        let planner = RoundPlanner(
            destination: settings.name, filter: filter, traccarAttributes: false, restriction: restriction,
            allowance: alarmAllowance, currentAhead: currentAhead, maxPositions: maxPositions,
            readBound: TraccarForwarder.positionsPerRound, parkSeconds: settings.parkSeconds, nowMs: WallClock.nowMs())
        let (wire, maxBytes) = (self.wire, push.batchMaxBytes)
        return try await reader.run { reader in
            let plan = try reader.snapshot { reader throws(SpoolError) in
                try planner.plan(ledger: initial, source: reader)
            }
            func item(_ delivery: Delivery) -> Item {
                Item(delivery: delivery, point: wire.encodePoint(delivery.stored.position))
            }
            let round = (plan.kind, plan.backfilling)
            switch plan.kind {
            case nil:
                return ([], false, plan.settled, round)
            case .alarms?, .stillAlive?, .current?, .replay?:
                // Ahead of the backlog, or history: a batch of its own, sent at once.
                return (plan.deliveries.map(item), true, plan.settled, round)
            case .backlog?:
                // Oldest first across devices; taking a prefix keeps each device's part a prefix too.
                var items: [Item] = []
                var bytes = 2
                for delivery in plan.deliveries.sorted(by: { $0.stored.seq < $1.stored.seq }) {
                    let next = item(delivery)
                    if items.count == maxPositions || (!items.isEmpty && bytes + next.point.count + 1 > maxBytes) {
                        return (items, true, plan.settled, round)
                    }
                    items.append(next)
                    bytes += next.point.count + 1
                }
                return (items, items.count >= maxPositions || plan.more, plan.settled, round)
            }
        }
    }

    /// No usable token: wait (login mode retries with backoff; token mode waits for a new token).
    private func handleAuth(_ error: PushAuthError, backoff: inout Backoff) async -> DestinationLink.Resumption {
        switch error {
        case .unavailable(_, let retryAfter, let transport):
            return await link.backOff(
                reason: error.description, retryAfter: retryAfter, transport: transport, backoff: &backoff)
        case .rejected(let reason):
            let delay = push.authMode == .token ? settings.probeIntervalSeconds : backoff.nextDelay()
            logger.error("authentication failed: \(reason)")
            recorder.record(.authFailed, error: reason, nextAttemptMs: WallClock.nowMs() + Int64(delay * 1000))
            try? await Task.sleep(for: .milliseconds(Int(delay * 1000)))
            return .trial
        }
    }
}

extension PushSettings.Compression {
    /// zstd > gzip > none.
    var strength: Int {
        switch self {
        case .zstd: 2
        case .gzip: 1
        case .none: 0
        }
    }
}

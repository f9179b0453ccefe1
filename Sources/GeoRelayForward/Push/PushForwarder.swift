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
    /// Sends the rounds, on its own thread.
    let engine: QueueConfined<PushEngine>
    let wakeEngine: @Sendable () -> Void
    private let reader: QueueConfined<SpoolReader>
    let encoder: QueueConfined<ZstdCompressor>
    private let filter: LocationFilter
    package let auth: PushAuthenticator
    let shutdown: ForwarderShutdown
    /// Where a spent uplink budget restricts what goes; nil without uplinks.
    let gate: UplinkGate?
    /// Alarms per device and hour over a restricted uplink.
    private let alarmAllowance = AlarmAllowance()
    /// Every hand-over's bill, record and spend (batches, probes, logins).
    let recorder: DeliveryRecorder
    let clock: any RelayClock

    /// - Parameters:
    ///   - now: the token's schedule (a test's own wall time); nil: `clock`'s, steadied (`steadyWall`).
    ///   - clock: the relay's time: the loop's waits, the batches' plans, the link's watch.
    package convenience init(
        settings: Configuration.DestinationSettings, spool: Spool, logger: Logger, gate: UplinkGate? = nil,
        now: (@Sendable () -> Int64)? = nil, clock: any RelayClock = SystemClock(), random: RandomSource = .system
    ) throws {
        let meter = WireMeter()
        try self.init(
            settings: settings, spool: spool, logger: logger, gate: gate, now: now, clock: clock, random: random,
            meter: meter,
            auth: try HTTPWorker(label: "georelay.auth.\(settings.name)", tls: settings.tls, meter: meter))
    }

    /// A destination whose rounds, probes, bare attempts and auth requests go where the caller
    /// says: `network` for the rounds (nil: libcurl's), `probe` and `connect` for the link's
    /// watch (nil: libcurl's), `auth` for the token and the login.
    init(
        settings: Configuration.DestinationSettings, spool: Spool, logger: Logger, gate: UplinkGate?,
        now: (@Sendable () -> Int64)?, clock: any RelayClock, random: RandomSource, meter: WireMeter,
        auth transport: any AuthTransport, network: (any RoundNetwork)? = nil, probe: DestinationLink.Probe? = nil,
        connect: DestinationLink.ConnectAttempt? = nil
    ) throws {
        self.settings = settings
        self.clock = clock
        self.gate = gate
        self.push = settings.push ?? PushSettings()
        self.spool = spool
        self.logger = logger.with(label: "forward[\(settings.name)]")
        recorder = DeliveryRecorder(destination: settings.name, spool: spool, meter: meter, gate: gate, clock: clock)
        let spare = network == nil && SpareConnection.worthKeeping(for: settings) ? SpareConnection() : nil
        self.link = try DestinationLink(
            settings: settings, recorder: recorder, logger: self.logger, probe: probe, linkChanges: gate?.linkChanges,
            spare: spare, connect: connect, clock: clock, random: random)
        self.wire = PushProtocol(settings: settings)
        let engine = try PushEngine(
            settings: settings, state: Self.initialState(push), meter: meter, logger: self.logger, spare: spare,
            network: network, clock: clock)
        wakeEngine = engine.wake
        shutdown = ForwarderShutdown(wake: engine.wake)
        self.engine = QueueConfined(label: "georelay.push.\(settings.name)", engine)
        self.reader = QueueConfined(label: "georelay.reader.\(settings.name)", try spool.makeReader())
        self.encoder = QueueConfined(label: "georelay.encode.\(settings.name)", try ZstdCompressor())
        self.filter = LocationFilter(settings: settings.filter)
        self.auth = PushAuthenticator(
            settings: settings, store: TokenStore(spoolPath: spool.path, destination: settings.name),
            worker: transport, logger: self.logger, now: now ?? clock.steadyWall(), clock: now == nil ? clock : nil)
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
        let name = settings.name
        if let stored = try? await reader.run({ try $0.encoding(destination: name) }),
            let remembered = PushSettings.Compression(rawValue: stored), remembered.strength < push.compression.strength
        {
            await engine.run { $0.state.encoding = remembered }
        }
        let ledger = DeliveryLedger(
            destination: name, filters: (try? await reader.run { try $0.filterStates(destination: name) }) ?? [:])
        if !settings.buffer {
            logger.warning("buffer: false is not supported for push destinations; positions queue as usual")
        }
        let rounds = PushRounds(self, ledger: ledger)
        await DestinationLoop.run(
            rounds, settings: settings, link: link, recorder: recorder, spool: spool, logger: logger, clock: clock)
    }

    /// How long a batch that is not full waits: at most `batch.maxDelaySeconds` after its oldest
    /// position arrived; nil when it goes now. The delay gathers live fixes into fewer requests
    /// while the link delivers; a batch whose oldest position was already waiting when delivery
    /// last (re)started, at `heldUntilMs` (the link's return, the relay's start), has waited out
    /// the outage and goes now: a backlog's tail costs no `maxDelaySeconds` after the link returns.
    func waitMs(before prepared: Prepared, heldUntilMs: Int64) -> Int64? {
        guard !prepared.full, let oldest = prepared.items.map(\.delivery.stored.receivedMs).min(),
            oldest > heldUntilMs
        else { return nil }
        let maxDelayMs = CheckedNumbers.milliseconds(seconds: push.batchMaxDelaySeconds) ?? 0
        let due = oldest + maxDelayMs
        let nowMs = clock.nowMs()
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
    ///   - maxPositions: a smaller batch than the state's (a budget's remainder).
    ///   - currentAhead: whether devices behind send their newest position ahead of the backlog
    ///     (false while a window gives way to the backlog: `DrainOrder.currentDue`).
    ///   - trial: the batch is a trial after backing off (its size is the planner's).
    func prepare(
        ledger: DeliveryLedger, state: DeliveryState, maxPositions: Int? = nil,
        restriction: UplinkGate.Restriction? = nil, currentAhead: Bool = true, trial: Bool = false
    ) async throws -> Prepared {
        let started = clock.monotonicNs()
        let (items, full, settled, plan) = try await nextBatch(
            ledger: ledger, maxPositions: min(state.maxPositions, maxPositions ?? .max),
            restriction: restriction, currentAhead: currentAhead, trial: trial)
        guard !items.isEmpty else {
            return Prepared(
                items: [], full: false, settled: settled, encoding: state.encoding, body: [], kind: plan.kind,
                backfilling: plan.backfilling)
        }
        let planning = Double(clock.monotonicNs() &- started) / 1e9
        var encoded = try await encode(items[...], encoding: state.encoding, planner: state.planner)
        encoded.compression?.planningSeconds = planning
        return Prepared(
            items: items, full: full, settled: settled, encoding: state.encoding, body: encoded.body,
            compression: encoded.compression, kind: plan.kind, backfilling: plan.backfilling)
    }

    private static func initialState(_ push: PushSettings) -> DeliveryState {
        DeliveryState(
            encoding: push.compression, maxPositions: push.batchMaxPositions,
            planner: CompressionPlanner(fixedLevel: push.zstdLevel))
    }

    /// What the rounds carry between batches.
    struct DeliveryState: Sendable {
        var encoding: PushSettings.Compression
        /// Lowered by 413 answers.
        var maxPositions: Int
        var planner: CompressionPlanner
    }

    /// JSON, then the chosen compression, off the cooperative pool.
    func encode(_ chunk: ArraySlice<Item>, encoding: PushSettings.Compression, planner: CompressionPlanner) async throws
        -> PushRound.Encoded
    {
        let (wire, points, clock) = (self.wire, chunk.map(\.point), self.clock)
        return try await encoder.run { zstd in
            let json = wire.encodeBatch(points)
            switch encoding {
            case .none: return PushRound.Encoded(body: json)
            case .gzip: return PushRound.Encoded(body: try Gzip.compress(json))
            case .zstd:
                let level = planner.level(forJSONBytes: json.count)
                let started = clock.monotonicNs()
                let body = try zstd.compress(json, level: level)
                let seconds = Double(clock.monotonicNs() &- started) / 1e9
                return PushRound.Encoded(
                    body: body,
                    compression: CompressionMeasurement(
                        level: level, jsonBytes: json.count, compressedBytes: body.count, seconds: seconds))
            }
        }
    }

    /// The next batch, of the round `RoundPlanner` plans from one read of the spool: what goes
    /// ahead of the backlog (or a replay) as a batch of its own; a backlog as the oldest pending
    /// positions the filter keeps across devices, each device's part a prefix of its own
    /// backlog, closed by count or bytes.
    private func nextBatch(
        ledger initial: DeliveryLedger, maxPositions: Int, restriction: UplinkGate.Restriction?,
        currentAhead: Bool, trial: Bool
    ) async throws -> ([Item], Bool, DeliveryUpdate, (kind: RoundPlanner.Kind?, backfilling: Bool)) {
        let planner = RoundPlanner(
            destination: settings.name, filter: filter, traccarAttributes: false, restriction: restriction,
            allowance: alarmAllowance, currentAhead: currentAhead, maxPositions: maxPositions,
            trial: trial ? .oneBatch : nil, readBound: TraccarForwarder.positionsPerRound,
            parkSeconds: settings.parkSeconds, nowMs: clock.nowMs())
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
                let limit = plan.sendLimit
                for delivery in plan.deliveries.sorted(by: { $0.stored.seq < $1.stored.seq }) {
                    let next = item(delivery)
                    if items.count == limit || (!items.isEmpty && bytes + next.point.count + 1 > maxBytes) {
                        return (items, true, plan.settled, round)
                    }
                    items.append(next)
                    bytes += next.point.count + 1
                }
                return (items, items.count >= limit || plan.more, plan.settled, round)
            }
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

extension CompressionPlanner {
    /// Takes note of what preparing a batch cost: its compression and, when it was read from the
    /// spool for this send, the reading and planning before it.
    mutating func record(_ measurement: PushForwarder.CompressionMeasurement?) {
        guard let measurement else { return }
        recordCompression(
            level: measurement.level, jsonBytes: measurement.jsonBytes, compressedBytes: measurement.compressedBytes,
            seconds: measurement.seconds)
        if let planning = measurement.planningSeconds { recordPlanning(seconds: planning) }
    }
}

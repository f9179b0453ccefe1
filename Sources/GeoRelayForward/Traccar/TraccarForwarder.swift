import FoundationEssentials
import GeoRelayCore
import GeoRelaySpool
import Glibc

/// Delivers the spool to a Traccar server's OsmAnd port (or its Teltonika port, with
/// `protocol: "teltonika"`): per device oldest first, except that a device behind has its
/// newest sent ahead of its backlog (`DeliveryLedger.behind`).
///
/// Each round is what `RoundPlanner` plans from the ledger and one read of the spool (alarms,
/// still-alive positions under a spent budget, current positions, the backlog, replays), sent a
/// batch per device, up to `concurrency` devices at once, each strictly in order (`OsmAndEngine`
/// or `TeltonikaEngine`, which only the wire tells apart); the
/// `DeliveryLedger` says what each answer settles, and its updates go to the spool without
/// waiting for the commit: a crash can only cause a resend of what was in flight. With the
/// buffer off, real-time only (`RealTimeRounds`, behind the same loop). When the destination is
/// unavailable the forwarder backs off (`DestinationLink`: probes while nothing
/// answers, a small trial when no probe proves the server) and
/// resumes at full speed once the server answers. Each destination has its own
/// forwarder, so one outage never slows another.
package final class TraccarForwarder: DestinationForwarder {
    package let settings: Configuration.DestinationSettings
    let spool: Spool
    let logger: Logger
    let engine: QueueConfined<any TraccarEngine>
    /// OsmAnd (`OsmAndEngine`), not Teltonika: a batch may be bounded until the server has taken
    /// one of it (`DeviceBatch.unproven`), and live fixes join a backfill's round.
    let osmAnd: Bool
    let wakeEngine: @Sendable () -> Void
    let link: DestinationLink
    let filter: LocationFilter
    let reader: QueueConfined<SpoolReader>
    let shutdown: ForwarderShutdown
    /// Where a spent uplink budget restricts what goes; nil without uplinks.
    let gate: UplinkGate?
    /// Alarms per device and hour over a restricted uplink.
    let alarmAllowance = AlarmAllowance()
    /// Every hand-over's bill, record and spend (every socket of its engine and probes).
    let recorder: DeliveryRecorder
    let clock: any RelayClock

    /// Positions read per round, shared among its devices: few devices get long
    /// chunks (fewer pauses between rounds), many get short ones (bounded memory).
    static let positionsPerRound = 8192
    /// Devices per round: bounds the memory a round holds with thousands of devices.
    static let devicesPerRound = 64

    /// - Parameter clock: the relay's time: the loop's waits, the rounds' plans, the link's watch.
    package convenience init(
        settings: Configuration.DestinationSettings, spool: Spool, logger: Logger, gate: UplinkGate? = nil,
        clock: any RelayClock = SystemClock()
    ) throws {
        let probeMeter = WireMeter()
        let spare = SpareConnection.worthKeeping(for: settings) ? SpareConnection() : nil
        try self.init(
            settings: settings, spool: spool, logger: logger, gate: gate, clock: clock, probeMeter: probeMeter,
            probe: try Self.makeProbe(settings, meter: probeMeter, clock: clock), spare: spare
        ) { meter, logger in
            try Self.makeEngine(settings, meter: meter, logger: logger, spare: spare, clock: clock)
        }
    }

    /// A destination whose rounds go through the engine `makeEngine` builds and whose probes are
    /// `probe`'s (the network's, or a simulation's link and server), its bare attempts `connect`'s.
    init(
        settings: Configuration.DestinationSettings, spool: Spool, logger: Logger, gate: UplinkGate?,
        clock: any RelayClock, probeMeter: WireMeter, probe: DestinationLink.Probe?, spare: SpareConnection? = nil,
        connect: DestinationLink.ConnectAttempt? = nil, random: RandomSource = .system,
        makeEngine: (WireMeter, Logger) throws -> any TraccarEngine
    ) throws {
        self.settings = settings
        self.clock = clock
        self.gate = gate
        self.spool = spool
        self.logger = logger.with(label: "forward[\(settings.name)]")
        let meter = WireMeter()
        recorder = DeliveryRecorder(destination: settings.name, spool: spool, meter: meter, gate: gate, clock: clock)
        let engine = try makeEngine(meter, self.logger)
        osmAnd = engine is OsmAndEngine
        self.wakeEngine = engine.wake
        self.engine = QueueConfined(label: "georelay.deliver.\(settings.name)", engine)
        self.link = try DestinationLink(
            settings: settings, recorder: recorder, logger: self.logger, probe: probe, probeMeter: probeMeter,
            linkChanges: gate?.linkChanges, spare: spare, connect: connect, clock: clock, random: random)
        self.filter = LocationFilter(settings: settings.filter)
        self.reader = QueueConfined(label: "georelay.reader.\(settings.name)", try spool.makeReader())
        self.shutdown = ForwarderShutdown(wake: engine.wake)
    }

    /// The Teltonika port answers no GET: probed by identifying, unless `probe.url` names an HTTP URL to GET.
    private static func makeProbe(
        _ settings: Configuration.DestinationSettings, meter: WireMeter, clock: any RelayClock
    ) throws -> DestinationLink.Probe? {
        guard settings.traccarProtocol == .teltonika, settings.probeURL == nil else { return nil }
        let probe = try TeltonikaProbe(settings: settings, meter: meter, clock: clock)
        return { await probe.check(timeout: $0) }
    }

    /// Teltonika frames for `protocol: "teltonika"`; OsmAnd requests framed by the engine, a
    /// window of `pipeline` on each connection (`pipeline: 1`: one request at a time).
    private static func makeEngine(
        _ settings: Configuration.DestinationSettings, meter: WireMeter, logger: Logger, spare: SpareConnection?,
        clock: any RelayClock
    ) throws -> any TraccarEngine {
        if settings.traccarProtocol == .teltonika {
            return try TeltonikaEngine(settings: settings, meter: meter, logger: logger, spare: spare, clock: clock)
        }
        return try OsmAndEngine(
            settings: settings, target: try HTTP1Target(url: settings.url), meter: meter, logger: logger, spare: spare,
            clock: clock)
    }

    package func run() async {
        await shutdown.run {
            if self.settings.buffer {
                await self.runBuffered()
            } else {
                await DestinationLoop.run(
                    RealTimeRounds(self), settings: self.settings, link: self.link, recorder: self.recorder,
                    spool: self.spool, logger: self.logger, clock: self.clock)
            }
        }
    }

    package func finish() { shutdown.finish() }
    package func abandon() { shutdown.abandon() }

    // MARK: - Buffered delivery

    private func runBuffered() async {
        let alarmWake = spool.alarms.subscribe()
        let positionWake = spool.commits.subscribe()
        // A budget spent during a round ends it as an alarm does: the next round is restricted.
        gate?.watch(alarmWake)
        defer {
            gate?.unwatch(alarmWake)
            spool.alarms.unsubscribe(alarmWake)
            spool.commits.unsubscribe(positionWake)
        }
        let name = settings.name
        let ledger = DeliveryLedger(
            destination: name, filters: (try? await reader.run { try $0.filterStates(destination: name) }) ?? [:])
        let rounds = TraccarRounds(self, ledger: ledger, alarms: alarmWake, positions: positionWake)
        await DestinationLoop.run(
            rounds, settings: settings, link: link, recorder: recorder, spool: spool, logger: logger, clock: clock)
    }

    /// A device batch this long is a backlog draining (``DeliveryUpdate/drain``).
    static let drainBatch = 8

    /// Positions that go ahead of their backlogs (alarms, still-alive positions, current
    /// positions), a batch per device.
    ///
    /// Traccar computes distance and engine hours against a device's latest position, so a
    /// position sent ahead of older ones makes them history to the server: the ledger marks the
    /// backlog that follows `archive=true` (the key Traccar's own decoders use for positions a
    /// device stored while it could not send) and skips the position's own place in it. The
    /// alternative, holding an alarm behind hours of backlog on a slow uplink, would defeat it.
    static func batches(_ deliveries: [Delivery], cursors: [DeviceCursor]) -> [DeviceBatch] {
        DeliveryLedger.byDevice(deliveries).compactMap { deliveries in
            cursors.first { $0.deviceID == deliveries[0].deviceID }.map {
                DeviceBatch(cursor: $0, deliveries: deliveries)
            }
        }
    }

    /// History queued by `georelay replay`, a batch per device: no cursor moves.
    static func replayBatches(_ deliveries: [Delivery]) -> [DeviceBatch] {
        DeliveryLedger.byDevice(deliveries).map(DeviceBatch.init(untracked:))
    }

    /// Each device's part of a backlog round. A pipelined window goes out before its first
    /// answer: a device not known to the server yet has a few requests on the wire until one is
    /// taken (`DeliveryLedger.window`), then the rest of its batch in the same round; a device
    /// nobody registered costs a few requests a park period, not a window. One request at a time
    /// and Teltonika (whose identification is answered before any frame) need no bound. A trial's
    /// bound is the planner's (`Plan.unproven`).
    func backlogBatches(_ plan: RoundPlanner.Plan, ledger: DeliveryLedger) -> [DeviceBatch] {
        Self.batches(plan.deliveries, cursors: plan.ready).map { batch in
            var batch = batch
            if osmAnd { batch.unproven = plan.unproven ?? ledger.window(for: batch.cursor.deviceID) }
            return batch
        }
    }

    /// A backfill's round and the live fixes that commit while it runs.
    struct LiveFixes: Sendable {
        let edge: DrainOrder.LiveEdge
        let commits: WakeSignal
        let join: LiveJoin
    }

    /// Runs one engine round. With `alarms`, an alarm committed meanwhile ends the round early
    /// (requests in flight finish, no new ones start), so the next round can send it ahead of
    /// everything; `live` fixes end it or join it as its edge says; `historyLeft` ends it when
    /// history has had its time. Cancelling the task (the forwarder is asked to finish) ends it
    /// early the same way; only an abandon drops the requests in flight.
    func send(
        _ batches: [DeviceBatch], mode: DeliveryMode, ledger: inout DeliveryLedger, alarms: WakeSignal? = nil,
        live: LiveFixes? = nil, historyLeft: Duration? = nil, maxPositions: Int = .max
    ) async -> [DeviceResult] {
        let stop = shutdown.abandoned
        let yield = AbortFlag()
        let (wake, before, recorder, clock) = (self.wakeEngine, ledger, self.recorder, self.clock)
        // A round with a device's backlog in it (not the steady state's position or two a device)
        // has its progress committed within a second.
        let drain = batches.contains { $0.deliveries.count >= Self.drainBatch }
        let (results, after) = await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { group in
                /// Ends the round once `until` returns: requests in flight finish, none start.
                func endRound(when until: @escaping @Sendable () async -> Void) {
                    group.addTask {
                        await until()
                        if !Task.isCancelled {
                            yield.set()
                            wake()
                        }
                    }
                }
                if let alarms {
                    alarms.clear()
                    endRound { await alarms.wait() }
                }
                if let live {
                    switch live.edge {
                    case .giveWay(let after):
                        // Not before its interval: a round ending at every fix would lose the
                        // pipelining that makes the backfill fast.
                        live.commits.clear()
                        endRound {
                            await clock.sleep(for: after)
                            await live.commits.wait()
                        }
                    case .join:
                        group.addTask { await self.joinLive(live.commits, into: live.join, ledger: before) }
                    case .none:
                        break
                    }
                }
                if let historyLeft {
                    // History goes first only so long (`DrainOrder`): then the current positions.
                    endRound { await clock.sleep(for: historyLeft) }
                }
                let outcome = await engine.run { engine in
                    var ledger = before
                    let round = EngineRound(
                        batches: batches, mode: mode, maxPositions: maxPositions, stop: stop, yield: yield,
                        live: live?.edge == .join ? live?.join : nil)
                    let results = engine.deliver(round, ledger: &ledger) { update in
                        var update = update
                        update.drain = drain
                        // On the engine's thread, between its socket calls: every live socket read now.
                        recorder.record(update)
                    }
                    return (results, ledger)
                }
                group.cancelAll()
                return outcome
            }
        } onCancel: {
            yield.set()
            wake()
        }
        ledger = after
        let abandoned = results.reduce(0) { $0 + $1.abandoned }
        if abandoned > 0 {
            logger.warning(
                "abandoned \(abandoned) requests in flight, unanswered; their positions go again, so the server may get them twice"
            )
            spool.add(counters: ["forward.abandoned.\(settings.name)": Int64(abandoned)])
        }
        return results
    }

    /// Until cancelled (the round ended), hands each device's newest position to the running round
    /// as it commits (`LiveJoin`): live fixes go next on the wire instead of waiting for the round
    /// to give way; only those the live edge's filter keeps (`LiveJoin.keep`).
    private func joinLive(_ commits: WakeSignal, into live: LiveJoin, ledger: DeliveryLedger) async {
        let name = settings.name
        // The first look is at once: a fix committed while the round was planned is not in it.
        commits.signal()
        while !Task.isCancelled {
            await commits.wait()
            guard !Task.isCancelled,
                let newest = try? await reader.run({ reader in
                    try reader.snapshot { reader throws(SpoolError) in
                        try reader.newest(of: try reader.pendingDevices(destination: name))
                    }
                })
            else { continue }
            let kept = live.keep(newest, filter: filter, ledger: ledger)
            guard !kept.isEmpty else { continue }
            live.post(kept)
            wakeEngine()
        }
    }
}

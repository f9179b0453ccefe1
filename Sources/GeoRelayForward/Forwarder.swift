import Foundation
import GeoRelayCore
import GeoRelaySpool
import Synchronization

/// Delivers the spool to one destination, oldest first per device.
///
/// Each round reads which devices have positions this destination has not
/// acknowledged, then works through up to `concurrency` devices at once, each
/// strictly in order. Acknowledgements go to the spool without waiting for
/// the commit: a crash can only cause a resend of what was in flight.
/// When the destination is unavailable the forwarder backs off (`DestinationLink`:
/// probes while nothing answers, one position as a trial when no probe proves
/// the server) and resumes at full speed once the server answers. Each destination has its own forwarder, so
/// one outage never slows another.
package final class Forwarder: DestinationForwarder {
    package let settings: Configuration.DestinationSettings
    private let spool: Spool
    private let logger: Logger
    private let traccar: TraccarProtocol
    private let engine: QueueConfined<DeliveryEngine>
    private let waker: CurlMulti.Waker
    private let link: DestinationLink
    private let filter: LocationFilter
    private let reader: QueueConfined<SpoolReader>

    /// Positions read per round, shared among its devices: few devices get long
    /// chunks (fewer pauses between rounds), many get short ones (bounded memory).
    static let positionsPerRound = 8192
    /// Devices per round: bounds the memory a round holds with thousands of devices.
    static let devicesPerRound = 64

    package init(settings: Configuration.DestinationSettings, spool: Spool, logger: Logger) throws {
        self.settings = settings
        self.spool = spool
        self.logger = logger.with(label: "forward[\(settings.name)]")
        self.traccar = TraccarProtocol(settings: settings)
        let engine = try DeliveryEngine(destination: settings.name, concurrency: settings.concurrency, tls: settings.tls)
        self.waker = engine.waker
        self.engine = QueueConfined(label: "georelay.deliver.\(settings.name)", engine)
        self.link = try DestinationLink(settings: settings, spool: spool, logger: self.logger)
        self.filter = LocationFilter(settings: settings.filter)
        self.reader = QueueConfined(label: "georelay.reader.\(settings.name)", try spool.makeReader())
    }

    /// Runs until the task is cancelled.
    package func run() async {
        let wake = spool.commits.subscribe()
        defer { spool.commits.unsubscribe(wake) }
        if settings.buffer {
            await runBuffered(wake: wake)
        } else {
            await runRealTime(wake: wake)
        }
    }

    // MARK: - Buffered delivery

    /// What the forwarder knows ahead of the spool's commits: cursors and filter memory per device.
    private struct Memory {
        var acked: [Int64: Int64] = [:]
        var filters: [Int64: FilterState] = [:]
        /// Alarms sent ahead of their backlog, before the spool has committed that.
        var alarmsSent: Set<Int64> = []

        mutating func absorb(_ result: DeviceResult) {
            if let seq = result.ackedSeq { acked[result.deviceID] = max(acked[result.deviceID] ?? 0, seq) }
            if let state = result.filterState { filters[result.deviceID] = state }
        }
    }

    private func runBuffered(wake: WakeSignal) async {
        let name = settings.name
        let alarmWake = spool.alarms.subscribe()
        defer { spool.alarms.unsubscribe(alarmWake) }
        var memory = Memory()
        memory.filters = (try? await reader.run { try $0.filterStates(destination: name) }) ?? [:]
        var backoff = Backoff(minSeconds: settings.backoffMinSeconds, maxSeconds: settings.backoffMaxSeconds)
        var state = DestinationState.online
        /// After backing off without proof that the server is back: the next round sends one position.
        var trial = false
        /// The last device of the previous round: the next round starts after it, so with more
        /// devices than fit in a round every device is served in turn, not the first 64 until done.
        var rotation: Int64 = 0
        while !Task.isCancelled {
            let nowMs = WallClock.nowMs()
            let cursors: [DeviceCursor]
            let alarms: (unsent: [StoredPosition], sent: Set<Int64>)
            do {
                (cursors, alarms) = try await reader.run { reader in
                    (try reader.pendingDevices(destination: name), try reader.pendingAlarms(destination: name))
                }
            } catch {
                logger.error("cannot read the spool: \(error)")
                try? await Task.sleep(for: .seconds(5))
                continue
            }
            var ready: [DeviceCursor] = []
            var nextUnpark: Int64?
            for var cursor in cursors {
                cursor.ackedSeq = max(cursor.ackedSeq, memory.acked[cursor.deviceID] ?? 0)
                guard cursor.ackedSeq < cursor.lastSeq else { continue }
                // A deadline more than one park period ahead means the wall clock went back
                // (NTP catching up after a cold start): the device is tried now rather than
                // sitting parked for however far the clock jumped.
                if let until = cursor.parkedUntilMs, until > nowMs, until <= nowMs + Int64(settings.parkSeconds * 1000) {
                    nextUnpark = min(nextUnpark ?? .max, until)
                    continue
                }
                ready.append(cursor)
            }
            if ready.isEmpty {
                // Nothing live waits: history queued by `georelay replay` goes now.
                if let results = await replayRound(cursors: cursors, maxPositions: trial ? 1 : .max), !results.isEmpty {
                    if let failure = results.compactMap(\.unavailable).first, case .unavailable(let reason, let retryAfter, let transport) = failure {
                        trial = await link.backOff(reason: reason, retryAfter: retryAfter, transport: transport, backoff: &backoff) == .trial
                    } else {
                        trial = false
                    }
                    continue
                }
                // A replay queued by another process is noticed within half a minute.
                let untilUnpark = nextUnpark.map { Duration.milliseconds(max(1, $0 - nowMs)) }
                await wake.wait(timeout: min(untilUnpark ?? .seconds(30), .seconds(30)))
                continue
            }

            let results: [DeviceResult]
            // Forget what the spool now records; keep what it has not committed yet.
            memory.alarmsSent.subtract(alarms.sent)
            let alarmsSent = alarms.sent.union(memory.alarmsSent)
            let readyAlarms = alarms.unsent.filter { alarm in
                !alarmsSent.contains(alarm.seq) && ready.contains { $0.deviceID == alarm.deviceID }
            }
            if !readyAlarms.isEmpty {
                results = await sendAlarmsFirst(readyAlarms, cursors: ready, memory: &memory, maxPositions: trial ? 1 : .max)
            } else {
                let turn = Self.inTurn(ready, after: rotation)
                rotation = turn.last?.deviceID ?? 0
                results = await deliverRound(turn, mode: .buffered, memory: &memory, alarmsSent: alarmsSent, alarms: alarmWake, maxPositions: trial ? 1 : .max)
            }
            var failure: DeliveryOutcome?
            var delivered = 0
            for result in results {
                memory.absorb(result)
                delivered += result.delivered
                if failure == nil { failure = result.unavailable }
            }
            if Task.isCancelled { break }
            if let failure, case .unavailable(let reason, let retryAfter, let transport) = failure {
                trial = await link.backOff(reason: reason, retryAfter: retryAfter, transport: transport, backoff: &backoff) == .trial
                state = .probing
                continue
            }
            // The server answered the round (a trial's position included): full rounds from here.
            trial = false
            if delivered > 0 {
                backoff.reset()
                if state != .online {
                    logger.notice("delivering again")
                }
                state = .online
            }
        }
    }

    /// Up to `devicesPerRound` devices (in id order), starting after the device `after`, wrapping round.
    static func inTurn(_ ready: [DeviceCursor], after: Int64) -> [DeviceCursor] {
        let split = ready.firstIndex { $0.deviceID > after } ?? ready.endIndex
        return Array((ready[split...] + ready[..<split]).prefix(devicesPerRound))
    }

    /// Alarms go ahead of their device's backlog.
    ///
    /// Traccar computes distance and engine hours against a device's latest
    /// position, so an alarm sent ahead of older positions makes them history to
    /// the server: the backlog that follows is marked `archive=true` (the key
    /// Traccar's own decoders use for positions a device stored while it could
    /// not send) and the alarm's own place in the backlog is skipped. The
    /// alternative, holding the alarm behind hours of backlog on a slow uplink,
    /// would defeat the point of an alarm.
    private func sendAlarmsFirst(_ alarms: [StoredPosition], cursors: [DeviceCursor], memory: inout Memory, maxPositions: Int) async -> [DeviceResult] {
        var batches: [DeviceBatch] = []
        for alarm in alarms {
            let planned = PlannedPosition(stored: alarm, ackThrough: alarm.seq, stateAfter: memory.filters[alarm.deviceID] ?? FilterState())
            if let index = batches.firstIndex(where: { $0.cursor.deviceID == alarm.deviceID }) {
                batches[index].planned.append(planned)
            } else if let cursor = cursors.first(where: { $0.deviceID == alarm.deviceID }) {
                batches.append(DeviceBatch(cursor: cursor, planned: [planned], outOfOrder: true))
            }
        }
        let results = await send(batches, mode: .buffered, maxPositions: maxPositions)
        // What the server now has as newest makes the older backlog history.
        var update = DeliveryUpdate(destination: settings.name)
        for batch in batches {
            guard let result = results.first(where: { $0.deviceID == batch.cursor.deviceID }), result.delivered > 0 else { continue }
            var state = memory.filters[batch.cursor.deviceID] ?? FilterState()
            let delivered = batch.planned.prefix(result.delivered)
            memory.alarmsSent.formUnion(delivered.map(\.stored.seq))
            let newest = delivered.map(\.stored.position.timeMs).max() ?? .min
            state.newestSentMs = max(state.newestSentMs ?? .min, newest)
            memory.filters[batch.cursor.deviceID] = state
            update.filterStates.append((batch.cursor.deviceID, state))
        }
        spool.record(update)
        return results
    }

    /// Sends the next chunk of the replay queue as history (`archive=true`): in
    /// fix-time order per device, without moving the live cursor. Nil when nothing is queued.
    private func replayRound(cursors: [DeviceCursor], maxPositions: Int) async -> [DeviceResult]? {
        let name = settings.name
        guard let queued = try? await reader.run({ try $0.replayQueue(destination: name, limit: Self.positionsPerRound) }), !queued.isEmpty else {
            return nil
        }
        var batches: [DeviceBatch] = []
        for stored in queued {
            var history = stored
            history.position.attributes.append(Attribute("archive", .bool(true)))
            let planned = PlannedPosition(stored: history, ackThrough: stored.seq, stateAfter: FilterState())
            if let index = batches.firstIndex(where: { $0.cursor.deviceID == stored.deviceID }) {
                batches[index].planned.append(planned)
            } else {
                let cursor = DeviceCursor(deviceID: stored.deviceID, device: stored.position.device, ackedSeq: 0, lastSeq: 0, parkedUntilMs: nil)
                batches.append(DeviceBatch(cursor: cursor, planned: [planned], outOfOrder: true, replay: true))
            }
        }
        return await send(batches, mode: .buffered, maxPositions: maxPositions)
    }

    /// Reads each device's next chunk, runs the filter over it and sends what it keeps.
    private func deliverRound(_ devices: [DeviceCursor], mode: DeliveryEngine.Mode, memory: inout Memory, alarmsSent: Set<Int64>,
                              alarms: WakeSignal? = nil, maxPositions: Int) async -> [DeviceResult] {
        let chunk = max(32, Self.positionsPerRound / max(1, devices.count))
        let read: [(DeviceCursor, [StoredPosition])]
        do {
            read = try await reader.run { reader in
                try devices.map { cursor in
                    (cursor, try reader.positions(deviceID: cursor.deviceID, device: cursor.device, after: cursor.ackedSeq, limit: chunk))
                }
            }
        } catch {
            logger.error("cannot read positions: \(error)")
            return []
        }
        var batches: [DeviceBatch] = []
        var settled = DeliveryUpdate(destination: settings.name)
        for (cursor, positions) in read {
            let plan = DevicePlan(positions, state: memory.filters[cursor.deviceID] ?? FilterState(), filter: filter,
                                  alreadySent: alarmsSent, traccarAttributes: true)
            if let leading = plan.leading {
                // Skipped before anything to send: settled now.
                settled.acknowledged.append((cursor.deviceID, leading.ackThrough))
                settled.filterStates.append((cursor.deviceID, leading.state))
                memory.acked[cursor.deviceID] = max(memory.acked[cursor.deviceID] ?? 0, leading.ackThrough)
                memory.filters[cursor.deviceID] = leading.state
            }
            if !plan.sends.isEmpty { batches.append(DeviceBatch(cursor: cursor, planned: plan.sends)) }
        }
        spool.record(settled)
        return await send(batches, mode: mode, alarms: alarms, maxPositions: maxPositions)
    }

    /// Runs one engine round. With `alarms`, an alarm committed meanwhile ends
    /// the round early (requests in flight finish, no new ones start), so the
    /// next round can send it ahead of everything.
    private func send(_ batches: [DeviceBatch], mode: DeliveryEngine.Mode, alarms: WakeSignal? = nil, maxPositions: Int = .max) async -> [DeviceResult] {
        let stop = StopFlag()
        let yield = StopFlag()
        let (traccar, parkSeconds, logger, spool, waker) = (self.traccar, settings.parkSeconds, self.logger, self.spool, self.waker)
        return await withTaskCancellationHandler {
            await withTaskGroup(of: [DeviceResult]?.self) { group in
                if let alarms {
                    alarms.clear()
                    group.addTask {
                        await alarms.wait()
                        if !Task.isCancelled {
                            yield.set()
                            waker.wake()
                        }
                        return nil
                    }
                }
                let results = await engine.run { engine in
                    engine.deliver(batches, mode: mode, traccar: traccar, parkSeconds: parkSeconds, maxPositions: maxPositions,
                                   stop: stop, yield: yield, logger: logger) { update in
                        spool.record(update)
                    }
                }
                group.cancelAll()
                return results
            }
        } onCancel: {
            stop.set()
            waker.wake()
        }
    }

    // MARK: - Real-time only (`buffer: false`)

    /// Tries each new position once when it arrives; drops it on failure, as
    /// the Traccar client does with its buffer off. Nothing queues.
    private func runRealTime(wake: WakeSignal) async {
        var after: Int64
        do {
            after = try await reader.run { try $0.newestSeq() }
        } catch {
            logger.error("cannot read the spool: \(error)")
            return
        }
        link.recordState(.online, error: nil, nextAttemptMs: nil)
        var filters: [Int64: FilterState] = [:]
        while !Task.isCancelled {
            await wake.wait()
            guard !Task.isCancelled else { break }
            let from = after
            guard let batch = try? await reader.run({ try $0.positions(after: from, limit: 10_000) }), let last = batch.last else { continue }
            after = last.seq
            // Per device, in order, through the filter, as a round of the engine.
            var byDevice: [Int64: [StoredPosition]] = [:]
            var order: [Int64] = []
            for stored in batch {
                if byDevice[stored.deviceID] == nil { order.append(stored.deviceID) }
                byDevice[stored.deviceID, default: []].append(stored)
            }
            var batches: [DeviceBatch] = []
            var attempted = 0
            for deviceID in order {
                let positions = byDevice[deviceID]!
                let plan = DevicePlan(positions, state: filters[deviceID] ?? FilterState(), filter: filter, traccarAttributes: true)
                // Tried once, whatever happens: the filter moves on as if it were sent.
                filters[deviceID] = plan.sends.last?.stateAfter ?? plan.leading?.state ?? filters[deviceID]
                attempted += plan.sends.count
                let cursor = DeviceCursor(deviceID: deviceID, device: positions[0].position.device, ackedSeq: 0, lastSeq: 0, parkedUntilMs: nil)
                if !plan.sends.isEmpty { batches.append(DeviceBatch(cursor: cursor, planned: plan.sends)) }
            }
            let results = await send(batches, mode: .realTime)
            let delivered = results.reduce(0) { $0 + $1.delivered }
            let dropped = attempted - delivered
            var update = DeliveryUpdate(destination: settings.name)
            if dropped > 0 {
                logger.warning("real-time destination dropped \(dropped) of \(attempted) positions (buffer is off)")
                update.state = .init(state: .backoff, lastError: "dropped \(dropped) positions")
            } else {
                update.state = .init(state: .online, lastSuccessMs: WallClock.nowMs())
            }
            spool.record(update)
        }
    }
}

/// Tells a running round to stop (shutdown).
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    func set() { flag.store(true, ordering: .relaxed) }
    var isSet: Bool { flag.load(ordering: .relaxed) }
}

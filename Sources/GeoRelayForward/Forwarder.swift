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
/// When the destination is unavailable the forwarder backs off and probes
/// (a TCP connect, or `probe.url`) instead of resending payloads, and resumes
/// at once when a probe succeeds. Each destination has its own forwarder, so
/// one outage never slows another.
package final class Forwarder: DestinationForwarder {
    package let settings: Configuration.DestinationSettings
    private let spool: Spool
    private let logger: Logger
    private let traccar: TraccarProtocol
    private let engine: QueueConfined<DeliveryEngine>
    private let waker: CurlMulti.Waker
    private let link: DestinationLink
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
        let engine = try DeliveryEngine(destination: settings.name, concurrency: settings.concurrency)
        self.waker = engine.waker
        self.engine = QueueConfined(label: "georelay.deliver.\(settings.name)", engine)
        self.link = try DestinationLink(settings: settings, spool: spool, logger: self.logger)
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

    private func runBuffered(wake: WakeSignal) async {
        var acked: [Int64: Int64] = [:]
        var backoff = Backoff(minSeconds: settings.backoffMinSeconds, maxSeconds: settings.backoffMaxSeconds)
        var state = DestinationState.online
        while !Task.isCancelled {
            let nowMs = WallClock.nowMs()
            let cursors: [DeviceCursor]
            do {
                let name = settings.name
                cursors = try await reader.run { try $0.pendingDevices(destination: name) }
            } catch {
                logger.error("cannot read the spool: \(error)")
                try? await Task.sleep(for: .seconds(5))
                continue
            }
            var ready: [DeviceCursor] = []
            var nextUnpark: Int64?
            for var cursor in cursors {
                cursor.ackedSeq = max(cursor.ackedSeq, acked[cursor.deviceID] ?? 0)
                guard cursor.ackedSeq < cursor.lastSeq else { continue }
                if let until = cursor.parkedUntilMs, until > nowMs {
                    nextUnpark = min(nextUnpark ?? .max, until)
                    continue
                }
                ready.append(cursor)
            }
            if ready.isEmpty {
                await wake.wait(timeout: nextUnpark.map { .milliseconds(max(1, $0 - nowMs)) })
                continue
            }

            let results = await deliverRound(Array(ready.prefix(Self.devicesPerRound)), mode: .buffered)
            var failure: DeliveryOutcome?
            var delivered = 0
            for result in results {
                if let seq = result.ackedSeq { acked[result.deviceID] = max(acked[result.deviceID] ?? 0, seq) }
                delivered += result.delivered
                if failure == nil { failure = result.unavailable }
            }
            if Task.isCancelled { break }
            if let failure, case .unavailable(let reason, let retryAfter, let transport) = failure {
                _ = await link.backOff(reason: reason, retryAfter: retryAfter, transport: transport, backoff: &backoff)
                state = .probing
            } else if delivered > 0 {
                backoff.reset()
                if state != .online {
                    logger.notice("delivering again")
                }
                state = .online
            }
        }
    }

    /// Reads each device's next chunk and sends them in one engine round.
    private func deliverRound(_ devices: [DeviceCursor], mode: DeliveryEngine.Mode) async -> [DeviceResult] {
        let batches: [DeviceBatch]
        let chunk = max(32, Self.positionsPerRound / max(1, devices.count))
        do {
            batches = try await reader.run { reader in
                try devices.map { cursor in
                    DeviceBatch(cursor: cursor, positions: try reader.positions(deviceID: cursor.deviceID, device: cursor.device, after: cursor.ackedSeq, limit: chunk))
                }
            }
        } catch {
            logger.error("cannot read positions: \(error)")
            return []
        }
        return await send(batches, mode: mode)
    }

    private func send(_ batches: [DeviceBatch], mode: DeliveryEngine.Mode) async -> [DeviceResult] {
        let stop = StopFlag()
        let (traccar, parkSeconds, logger, spool, waker) = (self.traccar, settings.parkSeconds, self.logger, self.spool, self.waker)
        return await withTaskCancellationHandler {
            await engine.run { engine in
                engine.deliver(batches, mode: mode, traccar: traccar, parkSeconds: parkSeconds, stop: stop, logger: logger) { update in
                    spool.record(update)
                }
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
        while !Task.isCancelled {
            await wake.wait()
            guard !Task.isCancelled else { break }
            let from = after
            guard let batch = try? await reader.run({ try $0.positions(after: from, limit: 10_000) }), let last = batch.last else { continue }
            after = last.seq
            // Per device, in order, as a round of the engine.
            var byDevice: [Int64: DeviceBatch] = [:]
            var order: [Int64] = []
            for stored in batch {
                if byDevice[stored.deviceID] == nil {
                    order.append(stored.deviceID)
                    byDevice[stored.deviceID] = DeviceBatch(cursor: DeviceCursor(deviceID: stored.deviceID, device: stored.position.device, ackedSeq: 0, lastSeq: 0, parkedUntilMs: nil), positions: [])
                }
                byDevice[stored.deviceID]?.positions.append(stored)
            }
            let results = await send(order.map { byDevice[$0]! }, mode: .realTime)
            let delivered = results.reduce(0) { $0 + $1.delivered }
            let dropped = batch.count - delivered
            var update = DeliveryUpdate(destination: settings.name)
            if dropped > 0 {
                logger.warning("real-time destination dropped \(dropped) of \(batch.count) positions (buffer is off)")
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

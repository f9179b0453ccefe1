import CCurl
import GeoRelayCore
import GeoRelaySpool

/// Sends rounds of OsmAnd requests over one curl multi handle, on one thread.
///
/// Each device has at most one request in flight (its order is strict); up to
/// `concurrency` devices are in flight at once, each on its own kept-alive
/// connection. A finished request starts the device's next one at once, on
/// this thread, with no hop through the task scheduler per position: that is
/// what lets one relay keep a local server busy. What each answer settles is the
/// ledger's to say; its updates are handed to `progress` as `ProgressCadence` says (every 128
/// positions, each second with bytes on the wire, and at the end of the round).
final class OsmAndEngine: TraccarEngine {
    private let traccar: TraccarProtocol
    private let multi: CurlMulti
    private let easies: [CurlEasy]
    private let destination: String
    private let parkSeconds: Double
    private let logger: Logger
    private let clock: any RelayClock

    init(
        settings: Configuration.DestinationSettings, meter: WireMeter? = nil, logger: Logger = .disabled,
        clock: any RelayClock = SystemClock()
    ) throws(CurlError) {
        destination = settings.name
        parkSeconds = settings.parkSeconds
        self.logger = logger
        self.clock = clock
        traccar = TraccarProtocol(settings: settings)
        multi = try CurlMulti()
        var easies: [CurlEasy] = []
        for _ in 0..<settings.concurrency { easies.append(try CurlEasy(tls: settings.tls, meter: meter)) }
        self.easies = easies
    }

    func closeConnections() {
        for easy in easies { easy.forgetConnections() }
    }

    var wake: @Sendable () -> Void {
        let waker = multi.waker
        return { waker.wake() }
    }

    private struct Slot {
        var batch: Int
        var index: Int
        var attempt = Attempt.first

        /// A position that got no answer is asked once more, then the `ServerCheck` canary
        /// (an empty request, not the position) decides whether the server or the link is at fault.
        enum Attempt {
            case first, retry, canary

            var next: Attempt { self == .first ? .retry : .canary }
        }
    }

    func deliver(_ round: EngineRound, ledger: inout DeliveryLedger, progress: (DeliveryUpdate) -> Void)
        -> [DeviceResult]
    {
        let (batches, mode, maxPositions, stop, yield) = (
            round.batches, round.mode, round.maxPositions, round.stop, round.yield
        )
        var results = batches.map { DeviceResult(deviceID: $0.cursor.deviceID) }
        var slots: [Slot?] = Array(repeating: nil, count: easies.count)
        var nextBatch = 0
        var halted = false
        var positionsLeft = maxPositions
        var update = DeliveryUpdate(destination: destination)
        var cadence = ProgressCadence(now: clock.now())

        func flush(force: Bool) {
            if cadence.due(update, force: force, now: clock.now()) {
                progress(update)
                update = DeliveryUpdate(destination: destination)
            }
        }

        func start(_ slot: Int, _ assignment: Slot) -> Bool {
            let stored = batches[assignment.batch].deliveries[assignment.index].stored
            do throws(CurlError) {
                try easies[slot].configure(
                    assignment.attempt == .canary ? traccar.canaryRequest() : traccar.request(for: stored.position))
                try multi.add(easies[slot])
                slots[slot] = assignment
                results[assignment.batch].attempted += 1
                if assignment.attempt == .first { positionsLeft -= 1 }
                return true
            } catch {
                logger.error("cannot start a request: \(error)")
                slots[slot] = nil
                return false
            }
        }

        /// No new requests: the destination failed, an alarm asks for the round to end early,
        /// or the trial's one position is out.
        var finishing: Bool { halted || yield?.isSet == true || positionsLeft <= 0 }

        /// Gives a free slot the next device that has positions, unless the round is finishing.
        func assignNextDevice(_ slot: Int) {
            while !finishing, nextBatch < batches.count {
                let batch = nextBatch
                nextBatch += 1
                if batches[batch].deliveries.isEmpty { continue }
                if start(slot, Slot(batch: batch, index: 0)) { return }
            }
            slots[slot] = nil
        }

        func advance(_ slot: Int, _ assignment: Slot) {
            let next = assignment.index + 1
            if !finishing, next < batches[assignment.batch].deliveries.count, !stop.isSet {
                if start(slot, Slot(batch: assignment.batch, index: next)) { return }
            }
            assignNextDevice(slot)
        }

        for slot in easies.indices { assignNextDevice(slot) }

        while slots.contains(where: { $0 != nil }) {
            if stop.isSet {
                // Abandoned: drop what is in flight; the spool still has it.
                for slot in easies.indices {
                    guard let assignment = slots[slot] else { continue }
                    multi.remove(easies[slot])
                    results[assignment.batch].abandoned += 1
                    slots[slot] = nil
                }
                break
            }
            do throws(CurlError) {
                try multi.perform()
            } catch {
                logger.error("curl multi failed: \(error)")
                break
            }
            while let finished = multi.nextFinished() {
                guard let slot = easies.firstIndex(where: { $0.handle == finished.easy }), let assignment = slots[slot]
                else { continue }
                multi.remove(easies[slot])
                let response = easies[slot].result(finished.code)
                if case .success(let http) = response { update.payloadBytes += http.wireBytes }
                let outcome =
                    assignment.attempt == .canary
                    ? ServerCheck.canaryOutcome(response) : traccar.outcome(of: response)
                if mode == .realTime {
                    if case .delivered = outcome {
                        update.sent += 1
                        results[assignment.batch].delivered += 1
                    }
                    advance(slot, assignment)
                    continue
                }
                if case .rejected = outcome, assignment.attempt != .canary, case .failure = response {
                    // A connection closed with no answer may also be a dying link or a middlebox:
                    // ask once more, then check that the server answers at all before blaming the payload.
                    let next = Slot(batch: assignment.batch, index: assignment.index, attempt: assignment.attempt.next)
                    if start(slot, next) { continue }
                }
                switch ledger.settle(
                    outcome, assignment.index..<(assignment.index + 1), of: batches[assignment.batch],
                    result: &results[assignment.batch], parkSeconds: parkSeconds, logger: logger, into: &update)
                {
                case .goesOn:
                    advance(slot, assignment)
                case .deviceParked:
                    assignNextDevice(slot)
                case .destinationFailed:
                    halted = true
                    slots[slot] = nil
                }
                flush(force: false)
            }
            if slots.contains(where: { $0 != nil }) {
                do throws(CurlError) {
                    try multi.poll(timeoutMs: 1000)
                } catch {
                    logger.error("curl multi poll failed: \(error)")
                    break
                }
            }
        }
        flush(force: true)
        return results
    }
}

@available(*, unavailable)
extension OsmAndEngine: Sendable {}

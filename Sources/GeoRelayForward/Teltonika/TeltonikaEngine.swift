import GeoRelayCore
import GeoRelaySpool
import Glibc

/// Sends rounds of positions to Traccar's Teltonika port, on one thread: codec 8 Extended
/// frames of up to 255 positions, one connection per device.
///
/// `TraccarForwarder` runs it as it runs the OsmAnd engines, so its modes (the buffered
/// backlog, alarms ahead of it, replays, real-time only), rotation over many devices, parking
/// and trials after a backoff are the same for both protocols; only the wire differs.
///
/// - Each device has its own connection (`TeltonikaSession`): Traccar attributes a data frame
///   to any device identified on its connection. Up to `concurrency` devices send at once, each
///   strictly in order. Connections stay open between rounds (the 64 most recently used), so a
///   device identifies once, not once per round.
/// - A device's frames go back to back, ahead of their answers, while the destination's frames
///   on the wire are fewer than the link holds (`PipelineDepth`, measured from the answers, at
///   most `pipeline` on a connection): a lone unit's backlog then costs a round trip, not one
///   per frame. A fleet fills the link with one frame per device, so there each device's next
///   frame waits for its answer, as it did before, and nothing queues in the modem ahead of an
///   alarm. Frames go behind frames only after the id's `0x01`, and only first attempts: a
///   retry, a half or a probe goes alone.
/// - A frame's 4-byte answer settles exactly its records, through the ledger; any other count
///   breaks the connection and settles nothing.
/// - `0x00` to the identification: the server does not know the device. It is parked, as the
///   OsmAnd port's `400` parks it, and the others go on.
/// - No answer within the request timeout, a reset, a close before the id's answer, bytes that
///   are not Traccar's: the link (or something on it) failed. Nothing of the frame settles; the
///   round ends and the destination backs off; the frame goes again (at-least-once).
/// - A clean close after a `0x01` with a frame unanswered is how Traccar refuses a frame it
///   cannot decode, but a dying link can look the same (and with frames behind it on the wire,
///   so can a reset: `TeltonikaSession` reports both as the first unanswered frame's close). The frame goes once more alone on a
///   fresh connection; closed again, it is halved (front half first, as the push destination
///   halves a refused batch) until a single position still closes the connection; that one is
///   quarantined only if a probe identification on another connection gets Traccar's answer
///   (`TeltonikaProbe`), which proves the server, not the link, refused it.
final class TeltonikaEngine: TraccarEngine {
    private let destination: String
    private let endpoint: TeltonikaSession.Endpoint
    private let requestTimeout: Duration
    private let lanes: Int
    private let wakeup: WakePipe
    /// How many frames the link holds: the destination's frames on the wire, across its connections.
    private var depth: PipelineDepth
    /// Connections kept between rounds, by device, with the round that last used each.
    private var idle: [Int64: (session: TeltonikaSession, round: Int)] = [:]
    private var round = 0
    /// Connections kept open between rounds at most: a round's worth of devices
    /// (`TraccarForwarder.devicesPerRound`); a fleet beyond that reconnects in turn.
    static let maxIdleConnections = 64

    init(settings: Configuration.DestinationSettings, meter: WireMeter? = nil) throws {
        destination = settings.name
        endpoint = try TeltonikaSession.Endpoint(settings: settings, meter: meter)
        requestTimeout = .milliseconds(Int(settings.requestTimeoutSeconds * 1000))
        lanes = settings.concurrency
        depth = PipelineDepth(ceiling: settings.pipeline)
        wakeup = try WakePipe()
    }

    var wake: @Sendable () -> Void { wakeup.signal }

    func closeConnections() {
        for (_, kept) in idle { kept.session.close() }
        idle.removeAll()
        depth.reset()
    }

    /// The frames a device's records go in: up to 255 records (the count is one byte) and at most
    /// `TeltonikaCodec.maxFrameBytes` (Traccar's frame decoder closes the connection on a longer
    /// one). Both are the protocol's own limits, taken whole: 255 positions of 30–45 bytes are 8 to
    /// 12 KiB, a fraction of a second on a satellite link, so a broken frame costs little to resend,
    /// and the bigger the frame, the fewer round trips a backlog costs (one per frame).
    static func frameEnd(_ records: ArraySlice<TeltonikaCodec.Record>, limit: Int) -> Int {
        records.startIndex
            + TeltonikaCodec.recordsFitting(records.prefix(min(limit, TeltonikaCodec.maxRecordsPerFrame)))
    }

    func deliver(
        _ batches: [DeviceBatch], mode: DeliveryMode, ledger: inout DeliveryLedger, parkSeconds: Double,
        maxPositions: Int, stop: AbortFlag, yield: AbortFlag?, logger: Logger, progress: (DeliveryUpdate) -> Void
    ) -> [DeviceResult] {
        round += 1
        var results = batches.map { DeviceResult(deviceID: $0.cursor.deviceID) }
        var nextBatch = 0
        var halted = false
        var positionsLeft = maxPositions
        var update = DeliveryUpdate(destination: destination)
        var active: [Work] = []
        let clock = ContinuousClock()
        let buffered = mode == .buffered

        func flush() {
            if !update.isEmpty { progress(update) }
            update = DeliveryUpdate(destination: destination)
        }

        /// No new frames (retries and halves of a suspect frame still go): the destination failed,
        /// an alarm asks for the round to end early, or the trial's one position is out.
        var finishing: Bool { halted || yield?.isSet == true || positionsLeft <= 0 }

        func fail(_ work: Work, _ reason: String) {
            results[work.batch].unavailable = .unavailable(reason, retryAfter: nil, transport: true)
            work.done = true
            halted = true
        }

        func park(_ work: Work, at index: Int, _ reason: String) {
            if buffered {
                _ = ledger.settle(
                    .unknownDevice(reason), index..<(index + 1), of: batches[work.batch],
                    result: &results[work.batch], parkSeconds: parkSeconds, logger: logger, into: &update)
                flush()
            }
            work.session.close()
            work.done = true
        }

        /// The device's connection kept from an earlier round, if it is still good, or a new one.
        func makeWork(_ batch: Int) -> Work? {
            let deliveries = batches[batch].deliveries
            guard let first = deliveries.first else { return nil }
            let session: TeltonikaSession
            let kept = idle.removeValue(forKey: first.deviceID)?.session
            if let kept, !kept.isStale {
                session = kept
            } else {
                if let kept {
                    // Closed by the server while idle (or it sent what nobody asked for): a new connection.
                    kept.close()
                    update.wireBytes += kept.takeWireBytes()
                }
                do throws(TeltonikaCodecError) {
                    session = try TeltonikaSession(uniqueID: first.device, endpoint: endpoint)
                } catch {
                    // The port cannot carry this id at all; parked, it shows in status and costs nothing.
                    if buffered {
                        ledger.park(first, seconds: parkSeconds, reason: error.message, logger: logger, into: &update)
                        flush()
                    }
                    return nil
                }
            }
            return Work(
                batch: batch, session: session,
                records: deliveries.map { TeltonikaCodec.record(from: $0.stored.position) })
        }

        /// Frames on the wire across the round's connections.
        var framesInFlight: Int { active.reduce(0) { $0 + $1.inFlight.count } }

        /// Sends the work's next frame, or the probe for its suspect, or marks it done. Returns
        /// whether it did any of these: the caller asks again until nothing moves.
        func advance(_ work: Work) -> Bool {
            guard !work.done, work.canary == nil else { return false }
            if stop.isSet || halted {
                // What is on the wire is still answered and settles; nothing new goes.
                guard work.inFlight.isEmpty else { return false }
                work.done = true
                return true
            }
            if let suspect = work.suspect {
                guard work.inFlight.isEmpty else { return false }
                probe(work, suspect)
                return true
            }
            if let last = work.inFlight.last {
                // Behind another frame: identified, first attempts only, and while the link holds
                // more than the destination has on it (the last frame's size stands for the next's).
                guard work.session.isKnown, work.mayPipeline, work.inFlight.count < depth.ceiling,
                    framesInFlight < depth.depth(batchBytes: last.bytes)
                else { return false }
            }
            var frame: Frame
            if !work.pending.isEmpty {
                frame = work.pending.removeFirst()
            } else {
                guard !finishing, work.next < work.records.count else {
                    guard work.inFlight.isEmpty else { return false }
                    work.done = true
                    return true
                }
                let end = Self.frameEnd(work.records[work.next...], limit: positionsLeft)
                frame = Frame(range: work.next..<end, attempt: .first)
                work.next = end
                positionsLeft -= frame.range.count
            }
            do throws(CurlError) {
                try work.session.connect()
            } catch {
                fail(work, error.message)
                return true
            }
            let bytes = TeltonikaCodec.dataFrame(records: work.records[frame.range])
            frame.bytes = bytes.count
            frame.sentAt = clock.now
            work.inFlight.append(frame)
            results[work.batch].attempted += frame.range.count
            if let event = work.session.send(frame: bytes) {
                handle(work, event)
            }
            return true
        }

        /// Identifies as the probe on a connection of its own: Traccar answers any id, so an answer
        /// proves the server is there and reading, and the record it closed on is at fault.
        func probe(_ work: Work, _ index: Int) {
            do {
                let canary = try TeltonikaSession(uniqueID: TeltonikaProbe.uniqueID, endpoint: endpoint)
                try canary.connect()
                work.canary = canary
                if let event = canary.identify() { handleCanary(work, event) }
            } catch {
                fail(work, "no answer to a position, and no connection for a probe: \(error)")
            }
        }

        func handleCanary(_ work: Work, _ event: TeltonikaSession.Event) {
            guard let canary = work.canary, let index = work.suspect else { return }
            update.wireBytes += canary.takeWireBytes()
            canary.close()
            work.canary = nil
            work.suspect = nil
            if case .identified = event {
                let reason =
                    "Traccar closed the connection without answering a frame of this position alone, and answers a probe"
                if buffered {
                    _ = ledger.settle(
                        .rejected(reason), index..<(index + 1), of: batches[work.batch],
                        result: &results[work.batch], parkSeconds: parkSeconds, logger: logger, into: &update)
                }
                flush()
            } else {
                fail(work, "no answer to a position nor to a probe: the link, not the payload")
            }
        }

        /// What an event on the work's own connection settles. Never sends: `advance` does.
        func handle(_ work: Work, _ event: TeltonikaSession.Event) {
            switch event {
            case .identified(.known):
                break
            case .identified(.unknown):
                let index = work.inFlight.first?.range.lowerBound ?? work.next
                work.inFlight.removeAll()
                park(
                    work, at: index, "Traccar's Teltonika port does not know the device (identification answered 0x00)")
            case .acknowledged(let count):
                guard !work.inFlight.isEmpty else { return }
                let frame = work.inFlight.removeFirst()
                let now = clock.now
                // An answer that came while the frame waited on the wire behind the one answered
                // before it measures the link's rate; one sent after that answer, the round trip.
                let spacing = work.lastAnswer.flatMap { frame.sentAt < $0 ? now - $0 : nil }
                depth.answered(bytes: frame.bytes, elapsed: now - frame.sentAt, spacing: spacing)
                work.lastAnswer = now
                guard count == frame.range.count else {
                    work.session.close()
                    work.inFlight.removeAll()
                    return fail(work, "Traccar answered \(count) to a frame of \(frame.range.count) records")
                }
                if buffered {
                    _ = ledger.settle(
                        .delivered, frame.range, of: batches[work.batch], result: &results[work.batch],
                        parkSeconds: parkSeconds, logger: logger, into: &update)
                } else {
                    update.sent += count
                    results[work.batch].delivered += count
                }
                update.wireBytes += work.session.takeWireBytes()
                // A frame can take seconds on a slow link: status says so at each one, not at the round's end.
                if buffered { update.state = .init(state: .online, lastSuccessMs: WallClock.nowMs()) }
                flush()
            case .broken(let reason):
                guard let frame = work.inFlight.first else { return }
                // The frames behind the first unanswered one are not suspect: they go again as they
                // were, after whatever the suspect becomes.
                let behind = work.inFlight.dropFirst().map { Frame(range: $0.range, attempt: $0.attempt) }
                work.inFlight.removeAll()
                work.lastAnswer = nil
                guard buffered else {
                    // Real-time only: tried once; the device's rest of this round is dropped with it.
                    work.done = true
                    return
                }
                work.pending.insert(contentsOf: behind, at: 0)
                switch reason {
                case .closedUnanswered where frame.attempt == .first:
                    work.pending.insert(Frame(range: frame.range, attempt: .retry), at: 0)
                case .closedUnanswered where frame.range.count > 1:
                    let middle = frame.range.lowerBound + frame.range.count / 2
                    work.pending.insert(
                        contentsOf: [
                            Frame(range: frame.range.lowerBound..<middle, attempt: .split),
                            Frame(range: middle..<frame.range.upperBound, attempt: .split),
                        ], at: 0)
                case .closedUnanswered:
                    work.suspect = frame.range.lowerBound
                case .notTraccar(let message), .failed(let message):
                    fail(work, message)
                }
            }
        }

        func retire(_ work: Work) {
            update.wireBytes += work.session.takeWireBytes()
            if let canary = work.canary {
                update.wireBytes += canary.takeWireBytes()
                canary.close()
            }
            // Only a connection that owes nothing is worth keeping.
            if work.session.isConnected, work.session.isKnown, !work.session.isAwaiting, !stop.isSet {
                idle[results[work.batch].deviceID] = (work.session, round)
            } else {
                work.session.close()
            }
        }

        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { scratch.deallocate() }
        var descriptors: [pollfd] = []
        while !stop.isSet {
            while active.count < lanes, !finishing, nextBatch < batches.count {
                let batch = nextBatch
                nextBatch += 1
                if let work = makeWork(batch) { active.append(work) }
            }
            // A frame that failed as it went out (a reset on send) leaves its retry to go at once, not after a poll.
            var moved = true
            while moved {
                moved = false
                for work in active where !work.done {
                    if advance(work) { moved = true }
                }
            }
            for work in active where work.done { retire(work) }
            active.removeAll { $0.done }
            if active.isEmpty {
                if finishing || nextBatch >= batches.count { break }
                continue
            }
            descriptors.removeAll(keepingCapacity: true)
            descriptors.append(pollfd(fd: wakeup.readEnd, events: Int16(POLLIN), revents: 0))
            var soonest: ContinuousClock.Instant?
            for work in active {
                let session = work.canary ?? work.session
                guard session.isConnected else { continue }
                descriptors.append(
                    pollfd(
                        fd: session.descriptor, events: Int16(POLLIN) | (session.hasOutput ? Int16(POLLOUT) : 0),
                        revents: 0))
                if session.isAwaiting { soonest = min(soonest ?? session.lastProgress, session.lastProgress) }
            }
            // Computed in the call, so a poll interrupted by a signal waits only for what is left.
            var waitMs: Int32 {
                Int32(
                    soonest.map {
                        max(0, min(1000, Int(clock.now.duration(to: $0 + requestTimeout) / .milliseconds(1)) + 1))
                    } ?? 1000)
            }
            do throws(SystemError) {
                try syscall("poll") { poll(&descriptors, nfds_t(descriptors.count), waitMs) }
            } catch {
                logger.error("\(error)")
                break
            }
            if descriptors[0].revents != 0 { wakeup.drain() }
            for work in active {
                let probing = work.canary != nil
                let session = work.canary ?? work.session
                func deliver(_ event: TeltonikaSession.Event) {
                    if probing { handleCanary(work, event) } else { handle(work, event) }
                }
                guard session.isConnected else { continue }
                if let entry = descriptors.first(where: { $0.fd == session.descriptor }), entry.revents != 0 {
                    if entry.revents & Int16(POLLOUT) != 0, let event = session.flush() {
                        deliver(event)
                        continue
                    }
                    for event in session.receive(into: scratch) { deliver(event) }
                } else if session.isAwaiting, clock.now >= session.lastProgress + requestTimeout {
                    deliver(session.fail(.failed("no answer within \(requestTimeout): timed out")))
                }
            }
        }
        // Shutdown abandons what is in flight (the spool still has it, and the forwarder says how
        // many went unanswered); a finished round keeps its connections.
        for work in active {
            if stop.isSet {
                results[work.batch].abandoned += work.inFlight.reduce(0) { $0 + $1.range.count }
            }
            retire(work)
        }
        if idle.count > Self.maxIdleConnections {
            for (deviceID, kept) in idle.sorted(by: { $0.value.round < $1.value.round }).prefix(
                idle.count - Self.maxIdleConnections)
            {
                update.wireBytes += kept.session.takeWireBytes()
                kept.session.close()
                idle[deviceID] = nil
            }
        }
        flush()
        return results
    }
}

@available(*, unavailable)
extension TeltonikaEngine: Sendable {}

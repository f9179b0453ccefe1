import CCurl
import GeoRelayCore
import GeoRelaySpool
import Glibc

/// Sends rounds of OsmAnd requests pipelined on kept-alive connections (HTTP/1.1), on one thread.
///
/// libcurl no longer pipelines, so it only owns each connection (`CurlConnection`: DNS, TCP,
/// TLS and certificate checks) while this engine frames the requests and parses the answers.
/// A device's positions all go on one connection, up to `window` requests ahead of their
/// answers, which come back in order (Traccar's OsmAnd port is a Netty HTTP codec without
/// asynchronous handlers): a backlog costs one round trip per window, not one per position. Up
/// to `lanes` connections run at once, each taking the next device when its own are all sent,
/// so devices follow each other on a connection without waiting for its answers.
///
/// What may be settled, and what not:
/// - Answers settle positions in order, through the ledger. Once a device's answer is anything
///   but a delivery or a refusal (its device unknown, the server unavailable), the answers to its
///   requests behind it in the window are read and ignored: a later `200` would move the cursor
///   past a position the server does not have.
/// - A connection that closes or resets with requests unanswered settles nothing more; those
///   requests are sent again from the first unanswered one (at-least-once, as one request at a
///   time is). That first one is the suspect: Traccar closes the connection on a payload it
///   cannot decode. It goes alone on a fresh connection, and if it gets no answer again the
///   canary (`ServerCheck`) decides between the payload and the link, as `OsmAndEngine` does.
/// - A connection's first request goes alone until a response shows the server keeps
///   connections alive; a server that closes after every response (HTTP/1.0, `Connection:
///   close`) gets one request per connection. Three windows in a row broken with more than one
///   request unanswered fall back to one request at a time for ten minutes.
/// - Anything unexpected on the wire (a response that does not parse, bytes nobody asked for)
///   breaks the connection; it is never an acknowledgement.
final class PipelinedOsmAndEngine: TraccarEngine {
    private let destination: String
    private let url: String
    private let traccar: TraccarProtocol
    /// The request line's and `Host`'s bytes, laid out once: a request is a copy and the query.
    private let framing: TraccarProtocol.PipelinedFraming
    private let tls: Configuration.TLSSettings
    private let connectTimeoutSeconds: Double
    private let requestTimeout: Duration
    private let window: Int
    private let lanes: [Lane]
    private let wakeup: WakePipe
    /// What the server showed of keep-alive: nil until its first answer.
    private let meter: WireMeter?
    private var keepsAlive: Bool?
    /// Windows broken in a row with more than one request unanswered.
    private var brokenWindows = 0
    private var oneAtATimeUntil: ContinuousClock.Instant?
    /// How many requests all lanes together keep in flight: what the link holds, not `window` each.
    private var limit: InFlightLimit

    func closeConnections() {
        for lane in lanes { lane.close() }
        limit.reset()
    }

    init(settings: Configuration.DestinationSettings, target: HTTP1Target, meter: WireMeter? = nil) throws {
        destination = settings.name
        self.meter = meter
        url = settings.url
        traccar = TraccarProtocol(settings: settings)
        framing = TraccarProtocol.PipelinedFraming(target: target)
        tls = settings.tls
        connectTimeoutSeconds = settings.connectTimeoutSeconds
        requestTimeout = .milliseconds(Int(settings.requestTimeoutSeconds * 1000))
        window = settings.pipeline
        lanes = (0..<settings.concurrency).map { _ in Lane() }
        limit = InFlightLimit(ceiling: settings.pipeline * settings.concurrency)
        wakeup = try WakePipe()
    }

    var wake: @Sendable () -> Void { wakeup.signal }

    func deliver(
        _ batches: [DeviceBatch], mode: DeliveryMode, ledger: inout DeliveryLedger, parkSeconds: Double,
        maxPositions: Int, stop: AbortFlag, yield: AbortFlag?, logger: Logger, progress: (DeliveryUpdate) -> Void
    ) -> [DeviceResult] {
        precondition(mode == .buffered, "the pipelined engine serves buffered destinations only")
        var results = batches.map { DeviceResult(deviceID: $0.cursor.deviceID) }
        /// Per batch, the next delivery to send, and whether its device stopped for this round.
        var nextIndex = Array(repeating: 0, count: batches.count)
        var stopped = Array(repeating: false, count: batches.count)
        var nextBatch = 0
        var halted = false
        var positionsLeft = maxPositions
        var update = DeliveryUpdate(destination: destination)
        var cadence = ProgressCadence()
        let clock = ContinuousClock()

        func flush(force: Bool) {
            if cadence.due(update, force: force) {
                progress(update)
                update = DeliveryUpdate(destination: destination)
            }
        }
        var finishing: Bool { halted || yield?.isSet == true || positionsLeft <= 0 }

        func windowSize(_ lane: Lane) -> Int {
            if lane.inFlight.contains(where: { $0.attempt != .first }) || lane.suspect != nil { return 1 }
            if keepsAlive != true { return 1 }
            if let until = oneAtATimeUntil, clock.now < until { return 1 }
            return window
        }

        func fail(_ batch: Int, _ reason: String) {
            results[batch].unavailable = .unavailable(reason, retryAfter: nil, transport: true)
            stopped[batch] = true
            halted = true
        }

        /// The lane's next delivery: its own batches first, in order, then a new one.
        func nextDelivery(for lane: Lane) -> Int? {
            if let batch = lane.batches.first(where: { !stopped[$0] && nextIndex[$0] < batches[$0].deliveries.count }) {
                return batch
            }
            while nextBatch < batches.count {
                let batch = nextBatch
                nextBatch += 1
                if batches[batch].deliveries.isEmpty { continue }
                lane.batches.append(batch)
                return batch
            }
            return nil
        }

        var outstanding: Int { lanes.reduce(0) { $0 + $1.inFlight.count } }

        /// Numbers and times a request as it is queued, for the in-flight limit's round trips.
        func track(_ request: inout InFlight) {
            request.sequence = limit.sending(inFlight: outstanding)
            request.sentAt = clock.now
        }

        func connect(_ lane: Lane) -> String? {
            if lane.connection != nil { return nil }
            do throws(CurlError) {
                let connection = try CurlConnection(
                    url: url, tls: tls, connectTimeoutSeconds: connectTimeoutSeconds, meter: meter)
                try connection.connect()
                lane.connection = connection
                lane.lastProgress = clock.now
                return nil
            } catch {
                return error.message
            }
        }

        /// Queues what the lane may send now, then sends what the socket takes.
        func fill(_ lane: Lane) {
            guard !lane.hasOutput else { return send(lane) }
            lane.output.removeAll(keepingCapacity: true)
            lane.sentBytes = 0
            if let suspect = lane.suspect {
                guard lane.inFlight.isEmpty else { return }
                if let error = connect(lane) {
                    lane.suspect = nil
                    return fail(suspect.batch, error)
                }
                var request = suspect
                let position = batches[suspect.batch].deliveries[suspect.index].stored.position
                request.bytes =
                    suspect.attempt == .canary
                    ? framing.appendCanary(to: &lane.output)
                    : framing.append(position, to: &lane.output)
                update.wireBytes += request.bytes
                track(&request)
                lane.inFlight.append(request)
                lane.suspect = nil
                results[suspect.batch].attempted += 1
            }
            var room = limit.room(outstanding: outstanding)
            while lane.inFlight.count < windowSize(lane), room > 0, !finishing, !stop.isSet,
                let batch = nextDelivery(for: lane)
            {
                room -= 1
                if let error = connect(lane) { return fail(batch, error) }
                let index = nextIndex[batch]
                let bytes = framing.append(batches[batch].deliveries[index].stored.position, to: &lane.output)
                update.wireBytes += bytes
                var request = InFlight(batch: batch, index: index, bytes: bytes)
                track(&request)
                lane.inFlight.append(request)
                nextIndex[batch] += 1
                positionsLeft -= 1
                results[batch].attempted += 1
            }
            send(lane)
        }

        func send(_ lane: Lane) {
            guard let connection = lane.connection, lane.hasOutput else { return }
            do throws(CurlError) {
                while lane.hasOutput {
                    let taken = try connection.send(lane.output, from: lane.sentBytes)
                    if taken == 0 { break }
                    lane.sentBytes += taken
                    lane.lastProgress = clock.now
                }
            } catch {
                breakConnection(lane, .closed(error.message), logger: logger)
            }
        }

        /// What an answer to the lane's oldest request settles.
        func answer(_ lane: Lane, _ http: HTTP1Response) {
            let request = lane.inFlight.removeFirst()
            lane.answeredOnConnection += 1
            lane.lastProgress = clock.now
            limit.answered(sequence: request.sequence, roundTrip: clock.now - request.sentAt, now: clock.now)
            if lane.answeredOnConnection >= 2 * window { brokenWindows = 0 }
            // A connection's first answer says whether the server keeps connections alive (one that
            // closes after many answers, as nginx does after `keepalive_requests`, still does).
            if lane.answeredOnConnection == 1 { keepsAlive = http.keepAlive }
            update.wireBytes += http.response.wireBytes
            let batch = request.batch
            if !stopped[batch] {
                let outcome =
                    request.attempt == .canary
                    ? ServerCheck.canaryOutcome(.success(http.response)) : traccar.outcome(of: http.response)
                switch ledger.settle(
                    outcome, request.index..<(request.index + 1), of: batches[batch], result: &results[batch],
                    parkSeconds: parkSeconds, logger: logger, into: &update)
                {
                case .goesOn:
                    break
                case .deviceParked:
                    stopped[batch] = true
                case .destinationFailed:
                    stopped[batch] = true
                    halted = true
                }
                flush(force: false)
            }
            if !http.keepAlive {
                // The server closes after this answer: whatever was sent behind it was never read.
                requeue(lane, lane.inFlight)
                lane.inFlight.removeAll()
                lane.close()
            }
        }

        /// Unanswered requests go again from the first unanswered one of each device.
        func requeue(_ lane: Lane, _ unanswered: [InFlight]) {
            for request in unanswered where !stopped[request.batch] {
                nextIndex[request.batch] = min(nextIndex[request.batch], request.index)
            }
        }

        func breakConnection(_ lane: Lane, _ reason: Break, logger: Logger) {
            let unanswered = lane.inFlight
            lane.inFlight.removeAll()
            lane.close()
            guard let head = unanswered.first else { return }
            requeue(lane, Array(unanswered.dropFirst()))
            guard !stopped[head.batch] else { return }
            switch reason {
            case .failed(let message):
                requeue(lane, [head])
                fail(head.batch, message)
            case .closed(let message):
                if unanswered.count > 1 {
                    brokenWindows += 1
                    if brokenWindows >= 3, oneAtATimeUntil.map({ clock.now >= $0 }) ?? true {
                        logger.warning(
                            "pipelined windows keep breaking (\(message)); one request at a time for 10 minutes")
                        oneAtATimeUntil = clock.now + .seconds(600)
                        brokenWindows = 0
                    }
                }
                if head.attempt == .canary {
                    requeue(lane, [head])
                    fail(head.batch, "no answer to the position nor to an empty request: the link, not the payload")
                } else {
                    // The suspect goes alone; the device's requests behind it follow once it is settled.
                    lane.suspect = InFlight(batch: head.batch, index: head.index, attempt: head.attempt.next)
                }
            }
        }

        /// Reads what arrived and settles the answers in it.
        func receive(_ lane: Lane, into scratch: UnsafeMutableRawBufferPointer) {
            guard let connection = lane.connection else { return }
            do throws(CurlError) {
                // Over TLS curl may hold decrypted bytes: read until it would block.
                while let count = try connection.receive(into: scratch) {
                    if count == 0 {
                        while let http = try? lane.parser.finish() {
                            guard !lane.inFlight.isEmpty else { break }
                            answer(lane, http)
                            if lane.connection == nil { return }
                        }
                        return breakConnection(lane, .closed("the server closed the connection"), logger: logger)
                    }
                    lane.lastProgress = clock.now
                    lane.parser.append(UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                    do throws(HTTP1ParseError) {
                        while let http = try lane.parser.next() {
                            guard !lane.inFlight.isEmpty else {
                                return breakConnection(lane, .failed("an answer to no request"), logger: logger)
                            }
                            answer(lane, http)
                            if lane.connection == nil { return }
                        }
                    } catch {
                        return breakConnection(
                            lane, .failed("a response that does not parse: \(error)"), logger: logger)
                    }
                }
            } catch {
                breakConnection(lane, .closed(error.message), logger: logger)
            }
        }

        // A connection idle since the last round may have been closed by the server meanwhile.
        for lane in lanes {
            lane.batches.removeAll()
            lane.suspect = nil
            lane.inFlight.removeAll()
            if let connection = lane.connection,
                (try? connection.wait(readable: true, writable: false, timeout: .zero))?.readable != false
            {
                lane.close()
            }
        }
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { scratch.deallocate() }
        var descriptors: [pollfd] = []
        while !stop.isSet {
            for lane in lanes { fill(lane) }
            let busy = lanes.filter { !$0.inFlight.isEmpty || $0.hasOutput }
            if busy.isEmpty { break }
            descriptors.removeAll(keepingCapacity: true)
            descriptors.append(pollfd(fd: wakeup.readEnd, events: Int16(POLLIN), revents: 0))
            for lane in busy {
                guard let connection = lane.connection else { continue }
                descriptors.append(
                    pollfd(
                        fd: connection.descriptor, events: Int16(POLLIN) | (lane.hasOutput ? Int16(POLLOUT) : 0),
                        revents: 0))
            }
            let soonest = busy.map(\.lastProgress).min()! + requestTimeout
            // Computed in the call, so a poll interrupted by a signal waits only for what is left.
            var waitMs: Int32 { Int32(max(0, min(1000, Int(clock.now.duration(to: soonest) / .milliseconds(1)) + 1))) }
            do throws(SystemError) {
                try syscall("poll") { poll(&descriptors, nfds_t(descriptors.count), waitMs) }
            } catch {
                logger.error("\(error)")
                break
            }
            if descriptors[0].revents != 0 { wakeup.drain() }
            for lane in busy {
                guard let connection = lane.connection else { continue }
                if let entry = descriptors.first(where: { $0.fd == connection.descriptor }), entry.revents != 0 {
                    if entry.revents & Int16(POLLOUT) != 0 { send(lane) }
                    receive(lane, into: scratch)
                } else if !lane.inFlight.isEmpty, clock.now >= lane.lastProgress + requestTimeout {
                    breakConnection(lane, .failed("no answer within \(requestTimeout): timed out"), logger: logger)
                }
            }
        }
        if stop.isSet {
            // Abandoned: drop what is in flight; the spool still has it.
            for lane in lanes {
                for request in lane.inFlight { results[request.batch].abandoned += 1 }
                lane.inFlight.removeAll()
                lane.close()
            }
        }
        if results.contains(where: { $0.delivered > 0 }) {
            update.state = .init(state: .online, lastSuccessMs: WallClock.nowMs())
        }
        flush(force: true)
        return results
    }
}

@available(*, unavailable)
extension PipelinedOsmAndEngine: Sendable {}

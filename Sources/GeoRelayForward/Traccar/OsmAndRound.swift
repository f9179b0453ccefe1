import GeoRelayCore
import GeoRelaySpool

/// One round of OsmAnd requests, pipelined (a window of one for `pipeline: 1`), as a state machine without I/O: it is told what
/// happened on each connection (`Event`) and answers with what to do (`Action`), as
/// `IngestSession` is on the ingest side. `OsmAndEngine` is its I/O driver (libcurl's
/// connections and `poll`); tests drive it byte by byte without a socket.
///
/// What may be settled, and what not:
/// - Answers settle positions in order, through the ledger. Once a device's answer is anything
///   but a delivery or a refusal (its device unknown, the server unavailable), the answers to its
///   requests behind it in the window move no cursor: a later `200` would move it past a position
///   the server does not have. Behind a server unavailable for one request, a `200` settles its
///   position out of turn (sent ahead of its backlog, skipped when the backlog gets there), so it
///   does not cross the link twice.
/// - A connection that closes or resets with requests unanswered settles nothing more; those
///   requests are sent again from the first unanswered one (at-least-once, as one request at a
///   time is). That first one is the suspect: Traccar closes the connection on a payload it
///   cannot decode. It goes alone on a fresh connection, and if it gets no answer again the
///   canary (`ServerCheck`) decides between the payload and the link.
/// - A connection's first request goes alone until a response shows the server keeps
///   connections alive; a server that closes after every response (HTTP/1.0, `Connection:
///   close`) gets one request per connection. Three windows in a row broken with more than one
///   request unanswered fall back to one request at a time for ten minutes.
/// - Anything unexpected on the wire (a response that does not parse, bytes nobody asked for)
///   breaks the connection; it is never an acknowledgement.
/// - In real time (`buffer: false`) each position is tried once: what the server takes counts
///   as sent, and nothing else is settled, retried or held against the destination.
struct OsmAndRound: ConnectionRound {
    typealias ID = Int
    typealias Event = ConnectionEvent<Int>
    typealias Action = ConnectionAction<Int>

    /// What outlives a round: each lane's connection state and what the server has shown.
    struct Carried {
        var lanes: [PipelinedLane<InFlight>]
        /// What the server showed of keep-alive: nil until its first answer.
        var keepsAlive: Bool?
        /// Windows broken in a row with more than one request unanswered.
        var brokenWindows = 0
        var oneAtATimeUntil: RelayInstant?
        /// How many requests all lanes together keep in flight: what the link holds, not `window` each.
        var limit: InFlightLimit

        init(lanes: Int, window: Int) {
            self.lanes = Array(repeating: PipelinedLane(), count: lanes)
            limit = InFlightLimit(ceiling: window * lanes)
        }
    }

    /// The round's fixed parts.
    struct Setup {
        var destination: String
        var traccar: TraccarProtocol
        var framing: TraccarProtocol.PipelinedFraming
        var window: Int
        var requestTimeout: Duration
        let parkSeconds: Double
        let logger: Logger
    }

    private(set) var carried: Carried
    private let setup: Setup
    /// `.realTime` (`buffer: false`): each position tried once, whatever comes of it.
    private let mode: DeliveryMode
    /// The round's batches, and live fixes' batches joined since (`join`).
    private var batches: [DeviceBatch]
    private(set) var results: [DeviceResult]
    /// Per batch, where it stands in this round.
    private var sending: [Sending]
    /// Per batch holding live fixes not yet sent (`join`): the index after the last of them; empty
    /// but while a live fix waits, as the lane's next request looks here first.
    private var joinedUpTo: [Int: Int] = [:]
    private var nextBatch = 0
    private var halted = false
    private var yielding = false
    private var stopping = false
    /// The lane whose connection was asked for and is not yet open (or failed).
    private var opening: Int?
    private var positionsLeft: Int
    private var update: DeliveryUpdate
    private var cadence: ProgressCadence
    private var now: RelayInstant
    private var actions: [Action] = []

    var lanes: [PipelinedLane<InFlight>] { carried.lanes }
    /// Per lane, the batches it took this round, in order.
    private var laneBatches: [[Int]]
    /// Per lane, a suspect to send alone, with its next attempt.
    private var suspects: [InFlight?]

    /// - Parameter connected: which lanes still hold a connection the driver kept from the last
    ///   round (one the server closed meanwhile was dropped).
    init(
        _ batches: [DeviceBatch], setup: Setup, carried: Carried, connected: [Bool], maxPositions: Int,
        mode: DeliveryMode = .buffered, now: RelayInstant
    ) {
        self.batches = batches
        self.setup = setup
        self.mode = mode
        self.carried = carried
        self.now = now
        cadence = ProgressCadence(now: now)
        results = batches.map { DeviceResult(deviceID: $0.cursor.deviceID) }
        sending = Array(repeating: Sending(), count: batches.count)
        positionsLeft = maxPositions
        update = DeliveryUpdate(destination: setup.destination)
        laneBatches = Array(repeating: [], count: carried.lanes.count)
        suspects = Array(repeating: nil, count: carried.lanes.count)
        for lane in self.carried.lanes.indices { self.carried.lanes[lane].beginRound(connected: connected[lane]) }
    }

    /// Lanes with requests unanswered or bytes unsent: none after a `turn`, and the round is over.
    var busyLanes: [Int] { carried.lanes.indices.filter { carried.lanes[$0].isBusy } }

    /// Nothing in flight, nothing to send and no connection it asked for still opening: the
    /// round is over.
    var isFinished: Bool { busyLanes.isEmpty && opening == nil }

    var polled: [(id: Int, writing: Bool)] {
        busyLanes.compactMap { carried.lanes[$0].connected ? ($0, carried.lanes[$0].hasOutput) : nil }
    }

    func output(of lane: Int) -> (bytes: [UInt8], sent: Int)? {
        (carried.lanes[lane].output, carried.lanes[lane].sentBytes)
    }

    /// When the oldest silence among busy lanes reaches the request timeout.
    var deadline: RelayInstant? {
        busyLanes.map { carried.lanes[$0].lastProgress }.min().map { $0 + setup.requestTimeout }
    }

    mutating func handle(
        _ event: Event, at now: RelayInstant, ledger: inout DeliveryLedger
    ) -> [Action] {
        self.now = now
        actions.removeAll()
        switch event {
        case .turn(let yield):
            yielding = yield
            for lane in carried.lanes.indices { fill(lane) }
        case .verified:
            break
        case .opened(let lane):
            if opening == lane { opening = nil }
            carried.lanes[lane].opened(at: now)
            fill(lane)
            for other in carried.lanes.indices where other != lane { fill(other) }
        case .openFailed(let lane, let message):
            if opening == lane { opening = nil }
            if let suspect = suspects[lane] {
                suspects[lane] = nil
                fail(suspect.batch, message)
            } else if let batch = nextDelivery(for: lane) {
                fail(batch, message)
            }
            for other in carried.lanes.indices where other != lane { fill(other) }
        case .wrote(let lane, let count):
            carried.lanes[lane].wrote(count, at: now)
        case .received(let lane, let bytes):
            receive(lane, bytes, ledger: &ledger)
        case .peerClosed(let lane):
            while let (request, http) = carried.lanes[lane].answerAtClose(at: now) {
                answer(lane, request, http, ledger: &ledger)
            }
            if carried.lanes[lane].connected { breakConnection(lane, .closed("the server closed the connection")) }
        case .failed(let lane, let message):
            breakConnection(lane, .closed(message))
        case .tick:
            for lane in busyLanes where carried.lanes[lane].timedOut(at: now, after: setup.requestTimeout) {
                breakConnection(lane, .failed("no answer within \(setup.requestTimeout): timed out"))
            }
        case .stop:
            stopping = true
        case .joined(let newest):
            join(newest, ledger: ledger)
        }
        return actions
    }

    /// Ends the round: after `stop`, what is in flight abandoned; the last progress handed over.
    mutating func finish() -> [Action] {
        actions.removeAll()
        if stopping {
            // Abandoned: drop what is in flight; the spool still has it.
            for lane in carried.lanes.indices {
                for request in carried.lanes[lane].inFlight { results[request.batch].abandoned += 1 }
                carried.lanes[lane].inFlight.removeAll()
                close(lane)
            }
        }
        flush(force: true)
        return actions
    }

    // MARK: - Sending

    private var finishing: Bool { halted || yielding || positionsLeft <= 0 }
    private var outstanding: Int { carried.lanes.reduce(0) { $0 + $1.inFlight.count } }

    private func windowSize(_ lane: Int) -> Int {
        let state = carried.lanes[lane]
        if state.inFlight.contains(where: { $0.attempt != .first }) || suspects[lane] != nil { return 1 }
        if carried.keepsAlive != true { return 1 }
        if let until = carried.oneAtATimeUntil, now < until { return 1 }
        return setup.window
    }

    private mutating func fail(_ batch: Int, _ reason: String) {
        results[batch].unavailable = .unavailable(reason, retryAfter: nil, transport: true)
        sending[batch].stopped = true
        halted = true
    }

    /// The lane's next delivery: a live fix joined for a device of its own or of no lane's yet,
    /// then its own batches, in order, then a new one.
    private mutating func nextDelivery(for lane: Int) -> Int? {
        if let batch = joinedUpTo.keys.filter({
            !sending[$0].stopped && sending[$0].next < joinedUpTo[$0]! && (sending[$0].lane ?? lane) == lane
        }).min() {
            take(batch, on: lane)
            return batch
        }
        if let batch = laneBatches[lane].first(where: {
            !sending[$0].stopped && sending[$0].next < batches[$0].deliveries.count
        }) {
            return batch
        }
        while nextBatch < batches.count {
            let batch = nextBatch
            nextBatch += 1
            if batches[batch].deliveries.isEmpty || sending[batch].lane != nil { continue }
            take(batch, on: lane)
            return batch
        }
        return nil
    }

    private mutating func take(_ batch: Int, on lane: Int) {
        guard sending[batch].lane == nil else { return }
        sending[batch].lane = lane
        laneBatches[lane].append(batch)
    }

    /// Numbers and times a request as it is queued, for the in-flight limit's round trips.
    private mutating func track(_ request: inout InFlight) {
        request.sequence = carried.limit.sending(inFlight: outstanding)
        request.sentAt = now
    }

    /// Queues what the lane may send now (asking for a connection first if it has none).
    private mutating func fill(_ lane: Int) {
        guard carried.lanes[lane].startOutput() else { return actions.append(.send(lane)) }
        if let suspect = suspects[lane] {
            guard carried.lanes[lane].inFlight.isEmpty else { return }
            guard carried.lanes[lane].connected else { return open(lane) }
            var request = suspect
            let position = batches[suspect.batch].deliveries[suspect.index].stored.position
            request.bytes =
                suspect.attempt == .canary
                ? setup.framing.appendCanary(to: &carried.lanes[lane].output)
                : setup.framing.append(position, to: &carried.lanes[lane].output)
            update.payloadBytes += request.bytes
            track(&request)
            carried.lanes[lane].inFlight.append(request)
            suspects[lane] = nil
            results[suspect.batch].attempted += 1
        }
        var room = carried.limit.room(outstanding: outstanding, batch: min(setup.window, InFlightLimit.batch))
        while carried.lanes[lane].inFlight.count < windowSize(lane), room > 0, !finishing,
            let batch = nextDelivery(for: lane)
        {
            // The batch is the lane's now: once connected it goes on, or it fails with the connection.
            guard carried.lanes[lane].connected else { return open(lane) }
            // A device the server has not shown it knows: a few requests, until one is taken.
            if let bound = batches[batch].unproven, results[batch].delivered == 0,
                carried.lanes[lane].inFlight.count(where: { $0.batch == batch }) >= bound
            {
                break
            }
            room -= 1
            let index = sending[batch].next
            let bytes = setup.framing.append(
                batches[batch].deliveries[index].stored.position, to: &carried.lanes[lane].output)
            update.payloadBytes += bytes
            var request = InFlight(batch: batch, index: index, bytes: bytes)
            track(&request)
            carried.lanes[lane].inFlight.append(request)
            sending[batch].next += 1
            // Its live fixes all on the wire: the lane's own order again.
            if joinedUpTo[batch] == sending[batch].next { joinedUpTo[batch] = nil }
            positionsLeft -= 1
            results[batch].attempted += 1
        }
        if carried.lanes[lane].hasOutput { actions.append(.send(lane)) }
    }

    // MARK: - Answers

    private mutating func receive(_ lane: Int, _ bytes: UnsafeRawBufferPointer, ledger: inout DeliveryLedger) {
        guard carried.lanes[lane].connected else { return }
        carried.lanes[lane].received(bytes, at: now)
        do throws(PipelineFault) {
            while let (request, http) = try carried.lanes[lane].nextAnswer(at: now) {
                answer(lane, request, http, ledger: &ledger)
            }
        } catch {
            breakConnection(lane, .failed(error.reason))
        }
    }

    /// What an answer to the lane's oldest request settles.
    private mutating func answer(
        _ lane: Int, _ request: InFlight, _ http: HTTP1Response, ledger: inout DeliveryLedger
    ) {
        carried.limit.answered(sequence: request.sequence, roundTrip: now - request.sentAt, now: now)
        if carried.lanes[lane].answeredOnConnection >= 2 * setup.window { carried.brokenWindows = 0 }
        // A connection's first answer says whether the server keeps connections alive (one that
        // closes after many answers, as nginx does after `keepalive_requests`, still does).
        if carried.lanes[lane].answeredOnConnection == 1 { carried.keepsAlive = http.keepAlive }
        update.payloadBytes += http.response.wireBytes
        let batch = request.batch
        let outcome =
            request.attempt == .canary
            ? ServerCheck.canaryOutcome(.success(http.response)) : setup.traccar.outcome(of: http.response)
        if mode == .realTime {
            // Tried once, whatever the answer; nothing queues, so nothing is settled.
            if case .delivered = outcome {
                update.sent += 1
                results[batch].delivered += 1
                flush(force: false)
            }
        } else if sending[batch].stopped {
            // Taken behind one the server could not take now: it has this one.
            if sending[batch].unavailable, case .delivered = outcome {
                ledger.deliveredOutOfTurn(batches[batch].deliveries[request.index], into: &update)
                flush(force: false)
            }
        } else {
            switch ledger.settle(
                outcome, request.index..<(request.index + 1), of: batches[batch], result: &results[batch],
                parkSeconds: setup.parkSeconds, logger: setup.logger, into: &update)
            {
            case .goesOn:
                break
            case .deviceParked:
                sending[batch].stopped = true
            case .destinationFailed:
                sending[batch].stopped = true
                sending[batch].unavailable = true
                halted = true
            }
            flush(force: false)
        }
        if !http.keepAlive {
            // The server closes after this answer: whatever was sent behind it was never read.
            requeue(carried.lanes[lane].inFlight)
            carried.lanes[lane].inFlight.removeAll()
            close(lane)
        }
    }

    // MARK: - Live fixes

    /// Takes devices' newest positions committed since the round began: each goes next on its
    /// device's lane, behind only what that lane has on the wire (`DeviceBatch.join`), or on the
    /// first lane free for a device this round did not carry. Live fixes joined and not yet sent
    /// go in the order they came. Not once the round is ending: the next round sends them.
    private mutating func join(_ newest: [StoredPosition], ledger: DeliveryLedger) {
        guard !finishing, !stopping else { return }
        for stored in newest {
            guard let batch = batches.firstIndex(where: { $0.cursor.deviceID == stored.deviceID }) else {
                guard let ahead = ledger.joining(stored, after: []) else { continue }
                batches.append(DeviceBatch(untracked: [ahead]))
                results.append(DeviceResult(deviceID: stored.deviceID))
                sending.append(Sending())
                joinedUpTo[batches.count - 1] = 1
                continue
            }
            let at = max(sending[batch].next, joinedUpTo[batch] ?? 0)
            guard !sending[batch].stopped,
                !batches[batch].deliveries.contains(where: { $0.stored.seq >= stored.seq }),
                let ahead = ledger.joining(stored, after: batches[batch].deliveries[..<at])
            else { continue }
            batches[batch].join(ahead, at: at)
            joinedUpTo[batch] = at + 1
        }
    }

    private mutating func flush(force: Bool) {
        if cadence.due(update, force: force, now: now) {
            actions.append(.progress(update))
            update = DeliveryUpdate(destination: setup.destination)
        }
    }

    /// Unanswered requests go again from the first unanswered one of each device.
    private mutating func requeue(_ unanswered: some Sequence<InFlight>) {
        for request in unanswered where !sending[request.batch].stopped {
            sending[request.batch].next = min(sending[request.batch].next, request.index)
        }
    }

    /// Asks for the lane's connection, one lane at a time: the first failure (up to the connect
    /// timeout on a link that is down) ends the round, so the next lane's connection is asked for
    /// only once the last one opened.
    private mutating func open(_ lane: Int) {
        guard opening == nil else { return }
        opening = lane
        actions.append(.open(lane))
    }

    private mutating func close(_ lane: Int) {
        guard carried.lanes[lane].connected else { return }
        carried.lanes[lane].close()
        actions.append(.close(lane))
    }

    private mutating func breakConnection(_ lane: Int, _ reason: Break) {
        let unanswered = carried.lanes[lane].inFlight
        carried.lanes[lane].inFlight.removeAll()
        close(lane)
        // Real time: what went unanswered was tried, and is dropped.
        guard mode == .buffered, let head = unanswered.first else { return }
        requeue(unanswered.dropFirst())
        guard !sending[head.batch].stopped else { return }
        switch reason {
        case .failed(let message):
            requeue([head])
            fail(head.batch, message)
        case .closed(let message):
            if unanswered.count > 1 {
                carried.brokenWindows += 1
                if carried.brokenWindows >= 3, carried.oneAtATimeUntil.map({ now >= $0 }) ?? true {
                    setup.logger.warning(
                        "pipelined windows keep breaking (\(message)); one request at a time for 10 minutes")
                    carried.oneAtATimeUntil = now + .seconds(600)
                    carried.brokenWindows = 0
                }
            }
            if head.attempt == .canary {
                requeue([head])
                fail(head.batch, "no answer to the position nor to an empty request: the link, not the payload")
            } else {
                // The suspect goes alone; the device's requests behind it follow once it is settled.
                suspects[lane] = InFlight(batch: head.batch, index: head.index, attempt: head.attempt.next)
            }
        }
    }
}

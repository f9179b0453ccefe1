import GeoRelayCore
import GeoRelaySpool

/// One round of Teltonika frames as a state machine without I/O: it is told what happened on each
/// connection (`Event`) and answers with what to do (`Action`), as `OsmAndRound` is for
/// OsmAnd. `TeltonikaEngine` is its I/O driver (libcurl's connections and `poll`); each
/// connection's protocol is a `TeltonikaExchange` held here, so the whole round can be driven
/// byte by byte without a socket.
///
/// - Each device has its own connection: Traccar attributes a data frame to any device identified
///   on its connection. Up to `lanes` devices send at once, each strictly in order. Connections
///   stay open between rounds (`Carried.idle`, the most recently used), so a device identifies
///   once, not once per round; the driver checks a kept one before it is used again (`verify`).
/// - A device's frames go back to back, ahead of their answers, while the destination's frames
///   on the wire are fewer than the link holds (`PipelineDepth`, measured from the answers, at
///   most `pipeline` on a connection). Frames go behind frames only after the id's `0x01`, and
///   only first attempts: a retry, a half or a probe goes alone.
/// - A frame's 4-byte answer settles exactly its records, through the ledger; any other count
///   breaks the connection and settles nothing.
/// - `0x00` to the identification: the server does not know the device. It is parked, and the
///   others go on.
/// - No answer within the request timeout, a reset, a close before the id's answer, bytes that
///   are not Traccar's: the link (or something on it) failed. Nothing of the frame settles; the
///   round ends and the destination backs off; the frame goes again (at-least-once).
/// - A clean close after a `0x01` with a frame unanswered is how Traccar refuses a frame it
///   cannot decode, but a dying link can look the same. The frame goes once more alone on a
///   fresh connection; closed again, it is halved (front half first) until a single position
///   still closes the connection; that one is quarantined only if a probe identification on
///   another connection gets Traccar's answer (`TeltonikaProbe`), which proves the server, not
///   the link, refused it.
struct TeltonikaRound: ConnectionRound {
    typealias ConnectionID = Int

    typealias Event = ConnectionEvent<ConnectionID>
    typealias Action = ConnectionAction<ConnectionID>

    /// One connection's protocol state; the socket is the driver's.
    struct Connection {
        var exchange: TeltonikaExchange
        var isOpen = false
        /// When bytes last moved either way: the request timeout counts from here.
        var lastProgress: RelayInstant
    }

    /// What outlives a round: the link's measured depth and the connections kept open.
    struct Carried {
        var depth: PipelineDepth
        var connections: [ConnectionID: Connection] = [:]
        /// Open connections kept between rounds, by device, with the round that last used each.
        var idle: [Int64: (id: ConnectionID, round: Int)] = [:]
        var nextID: ConnectionID = 0
        var round = 0

        init(pipeline: Int) {
            depth = PipelineDepth(ceiling: pipeline)
        }
    }

    /// The round's fixed parts.
    struct Setup {
        var destination: String
        var lanes: Int
        var requestTimeout: Duration
        var buffered: Bool
        let parkSeconds: Double
        let logger: Logger
        /// Connections kept open between rounds at most.
        var maxIdle: Int
    }

    /// Kept between rounds: the driver takes it back at the end.
    private(set) var carried: Carried
    private let setup: Setup
    private let batches: [DeviceBatch]
    private(set) var results: [DeviceResult]
    private var active: [Work] = []
    private var nextBatch = 0
    private var halted = false
    private var yielding = false
    private var stopping = false
    private var positionsLeft: Int
    private var update: DeliveryUpdate
    private var now: RelayInstant
    private var actions: [Action] = []
    /// The connections asked for and not yet open (or failed): a fleet's handshakes go together.
    private var opening: Set<ConnectionID> = []

    init(
        _ batches: [DeviceBatch], setup: Setup, carried: Carried, maxPositions: Int, now: RelayInstant
    ) {
        self.batches = batches
        self.setup = setup
        self.carried = carried
        self.carried.round += 1
        self.now = now
        results = batches.map { DeviceResult(deviceID: $0.cursor.deviceID) }
        positionsLeft = maxPositions
        update = DeliveryUpdate(destination: setup.destination)
    }

    /// The connection's bytes waiting for the socket, and how many of them it has taken.
    func output(of id: ConnectionID) -> (bytes: [UInt8], sent: Int)? {
        carried.connections[id].map { ($0.exchange.output, $0.exchange.sentBytes) }
    }

    /// Connections the driver polls: the devices' open ones (or their probe's), and whether each has output.
    var polled: [(id: ConnectionID, writing: Bool)] {
        active.compactMap { work in
            let id = work.canary ?? work.connection
            guard let connection = carried.connections[id], connection.isOpen else { return nil }
            return (id, connection.exchange.hasOutput)
        }
    }

    /// Whether the round is over: no device active and none left to start.
    private(set) var isFinished = false

    /// When the oldest connection owing an answer reaches the request timeout.
    var deadline: RelayInstant? {
        polled.compactMap { entry in
            carried.connections[entry.id].flatMap { $0.exchange.isAwaiting ? $0.lastProgress : nil }
        }.min().map { $0 + setup.requestTimeout }
    }

    mutating func handle(
        _ event: Event, at now: RelayInstant, ledger: inout DeliveryLedger
    ) -> [Action] {
        self.now = now
        actions.removeAll()
        switch event {
        case .turn(let yield):
            yielding = yield
            turn(ledger: &ledger)
        case .verified(let id, let fresh):
            if !fresh {
                // Closed by the server while idle (or it sent what nobody asked for): a new connection.
                reset(id)
            }
            if let index = active.firstIndex(where: { $0.connection == id }) { active[index].verifying = false }
            turn(ledger: &ledger)
        case .opened(let id):
            opening.remove(id)
            carried.connections[id]?.isOpen = true
            carried.connections[id]?.lastProgress = now
            if active.contains(where: { $0.canary == id }) {
                carried.connections[id]?.exchange.queueIdentification()
                actions.append(.send(id))
            }
            turn(ledger: &ledger)
        case .openFailed(let id, let message):
            opening.remove(id)
            carried.connections[id]?.isOpen = false
            if let index = active.firstIndex(where: { $0.canary == id }) {
                carried.connections[id] = nil
                active[index].canary = nil
                fail(index, "no answer to a position, and no connection for a probe: \(message)")
            } else if let index = active.firstIndex(where: { $0.connection == id }) {
                fail(index, message)
            }
            turn(ledger: &ledger)
        case .wrote(let id, let count):
            carried.connections[id]?.exchange.wrote(count)
            carried.connections[id]?.lastProgress = now
            update.payloadBytes += count
        case .received(let id, let bytes):
            guard carried.connections[id]?.isOpen == true else { break }
            carried.connections[id]?.lastProgress = now
            update.payloadBytes += bytes.count
            let events = carried.connections[id]?.exchange.received(bytes) ?? []
            for event in events {
                if case .broken = event {
                    close(id)
                } else if carried.connections[id]?.exchange.hasOutput == true {
                    // The id's `0x01` lets the frame that waited for it go.
                    actions.append(.send(id))
                }
                deliver(event, on: id, ledger: &ledger)
            }
        case .peerClosed(let id):
            guard let reason = carried.connections[id]?.exchange.peerClosed() else { break }
            close(id)
            deliver(.broken(reason), on: id, ledger: &ledger)
        case .failed(let id, let message):
            guard let reason = carried.connections[id]?.exchange.failed(message) else { break }
            close(id)
            deliver(.broken(reason), on: id, ledger: &ledger)
        case .tick:
            for entry in polled {
                guard let connection = carried.connections[entry.id], connection.exchange.isAwaiting,
                    now >= connection.lastProgress + setup.requestTimeout
                else { continue }
                let reason = TeltonikaExchange.Break.failed("no answer within \(setup.requestTimeout): timed out")
                close(entry.id)
                deliver(.broken(reason), on: entry.id, ledger: &ledger)
            }
        case .stop:
            stopping = true
        case .joined:
            // Every device of a round sends at once here (`lanes`): its round is short, and a live
            // fix goes in the next.
            break
        }
        return actions
    }

    /// Ends the round: what is still in flight is abandoned (the spool still has it; the forwarder
    /// says how many went unanswered), connections that owe nothing are kept, the oldest kept ones
    /// beyond `maxIdle` closed, and the last progress handed over.
    mutating func finish() -> [Action] {
        actions.removeAll()
        for index in active.indices {
            if stopping {
                results[active[index].batch].abandoned += active[index].inFlight.reduce(0) { $0 + $1.range.count }
            }
            retire(index)
        }
        active.removeAll()
        if carried.idle.count > setup.maxIdle {
            // The least recently used first; among a round's, by device, so a replay closes the same.
            let oldest = carried.idle.sorted { ($0.value.round, $0.key) < ($1.value.round, $1.key) }
            for (deviceID, kept) in oldest.prefix(carried.idle.count - setup.maxIdle) {
                close(kept.id)
                carried.connections[kept.id] = nil
                carried.idle[deviceID] = nil
            }
        }
        flush()
        return actions
    }

    // MARK: - Answers

    private mutating func deliver(_ event: TeltonikaExchange.Event, on id: ConnectionID, ledger: inout DeliveryLedger) {
        if let index = active.firstIndex(where: { $0.canary == id }) {
            settleProbe(index, event, ledger: &ledger)
        } else if let index = active.firstIndex(where: { $0.connection == id }) {
            let batch = active[index].batch
            var settling = Work.Settling(
                batch: batches[batch], setup: setup, at: now, result: results[batch], update: update,
                depth: carried.depth)
            let verdict = active[index].settle(event, &settling, ledger: &ledger)
            (results[batch], update, carried.depth) = (settling.result, settling.update, settling.depth)
            if verdict.flush { flush() }
            if verdict.close { close(active[index].connection) }
            if let failure = verdict.failure { fail(index, failure) }
        }
    }

    /// The probe's verdict on a position that closed the connection: an answer to the probe
    /// proves the server, and the position is quarantined; none, and the link failed.
    private mutating func settleProbe(_ index: Int, _ event: TeltonikaExchange.Event, ledger: inout DeliveryLedger) {
        guard let canary = active[index].canary, let suspect = active[index].suspect else { return }
        close(canary)
        carried.connections[canary] = nil
        active[index].canary = nil
        active[index].suspect = nil
        if case .identified = event {
            let reason =
                "Traccar closed the connection without answering a frame of this position alone, and answers a probe"
            if setup.buffered {
                _ = ledger.settle(
                    .rejected(reason), suspect..<(suspect + 1), of: batches[active[index].batch],
                    result: &results[active[index].batch], parkSeconds: setup.parkSeconds, logger: setup.logger,
                    into: &update)
            }
            flush()
        } else {
            fail(index, "no answer to a position nor to a probe: the link, not the payload")
        }
    }

    // MARK: - Devices

    /// No new frames (retries and halves of a suspect frame still go): the destination failed,
    /// an alarm asks for the round to end early, or the trial's one position is out.
    private var finishing: Bool { halted || yielding || positionsLeft <= 0 }

    /// Starts devices while lanes are free, moves every device as far as it goes, and retires the done.
    private mutating func turn(ledger: inout DeliveryLedger) {
        while active.count < setup.lanes, !finishing, !stopping, nextBatch < batches.count {
            let batch = nextBatch
            nextBatch += 1
            start(batch, ledger: &ledger)
        }
        var moved = true
        while moved {
            moved = false
            for index in active.indices where !active[index].done {
                if advance(index, ledger: &ledger) { moved = true }
            }
        }
        for index in active.indices where active[index].done { retire(index) }
        active.removeAll { $0.done }
        if active.isEmpty, finishing || stopping || nextBatch >= batches.count {
            isFinished = true
        } else if active.isEmpty {
            turn(ledger: &ledger)
        }
    }

    /// The device's connection kept from an earlier round (checked by the driver first), or a new one.
    private mutating func start(_ batch: Int, ledger: inout DeliveryLedger) {
        let deliveries = batches[batch].deliveries
        guard let first = deliveries.first else { return }
        var verifying = false
        let id: ConnectionID
        if let kept = carried.idle.removeValue(forKey: first.deviceID) {
            id = kept.id
            verifying = true
            actions.append(.verify(id))
        } else {
            do throws(TeltonikaCodecError) {
                let exchange = TeltonikaExchange(
                    identification: try TeltonikaCodec.identification(uniqueID: first.device))
                id = newConnection(exchange)
            } catch {
                // The port cannot carry this id at all; parked, it shows in status and costs nothing.
                if setup.buffered {
                    ledger.park(
                        first, seconds: setup.parkSeconds, reason: error.message, logger: setup.logger, into: &update)
                    flush()
                }
                return
            }
        }
        let records = deliveries.map { TeltonikaCodec.record(from: $0.stored.position) }
        active.append(Work(batch: batch, connection: id, records: records, verifying: verifying))
    }

    private mutating func newConnection(_ exchange: TeltonikaExchange) -> ConnectionID {
        let id = carried.nextID
        carried.nextID += 1
        carried.connections[id] = Connection(exchange: exchange, lastProgress: now)
        return id
    }

    /// Bytes of frames on the wire across the round's connections, unanswered.
    private var bytesInFlight: Int { active.reduce(0) { $0 + $1.inFlight.reduce(0) { $0 + $1.bytes } } }

    /// Sends the work's next frame, or asks for the probe of its suspect, or marks it done. Returns
    /// whether it did any of these: the caller asks again until nothing moves.
    private mutating func advance(_ index: Int, ledger: inout DeliveryLedger) -> Bool {
        let work = active[index]
        guard !work.done, work.canary == nil, !work.verifying else { return false }
        guard let connection = carried.connections[work.connection] else { return false }
        if stopping || halted {
            // What is on the wire is still answered and settles; nothing new goes.
            guard work.inFlight.isEmpty else { return false }
            active[index].done = true
            return true
        }
        if work.suspect != nil {
            guard work.inFlight.isEmpty else { return false }
            return probe(index)
        }
        if !work.inFlight.isEmpty {
            // Behind another frame: identified and first attempts only.
            guard connection.exchange.isKnown, work.mayPipeline, work.inFlight.count < carried.depth.ceiling
            else { return false }
        }
        let hasNext = !work.pending.isEmpty || (!finishing && work.next < work.records.count)
        guard hasNext else {
            guard work.inFlight.isEmpty else { return false }
            active[index].done = true
            return true
        }
        guard connection.isOpen else {
            open(work.connection)
            return false
        }
        // An identification sent alone is answered before a frame goes behind it.
        guard connection.exchange.mayQueueFrame else { return false }
        var frame =
            work.pending.first
            ?? Frame(
                range: work.next..<TeltonikaEngine.frameEnd(work.records[work.next...], limit: positionsLeft),
                attempt: .first)
        let bytes = TeltonikaCodec.dataFrame(records: work.records[frame.range])
        // Every connection's frames share the link: no more on the wire than it holds and one
        // frame more, so what the round decides next (the current positions' turn) is a round trip
        // away, not seconds of history queued in the terminal.
        let onTheWire = bytesInFlight
        guard onTheWire == 0 || onTheWire + bytes.count <= carried.depth.bytesOnTheWire(batchBytes: bytes.count)
        else {
            // Identified meanwhile (a few bytes), its connection is open and known when its turn
            // comes: the current positions' round a give-way starts costs no handshake then. Not an
            // id too short to be answered alone (`identificationNeedsCompanion`): it would sit in
            // Traccar's frame decoder, unanswered, until the request timeout failed the round.
            guard !connection.exchange.isKnown, !connection.exchange.isAwaiting,
                !TeltonikaCodec.identificationNeedsCompanion(connection.exchange.identification)
            else { return false }
            carried.connections[work.connection]?.exchange.queueIdentification()
            carried.connections[work.connection]?.lastProgress = now
            actions.append(.send(work.connection))
            return true
        }
        if work.pending.isEmpty {
            active[index].next = frame.range.upperBound
            positionsLeft -= frame.range.count
        } else {
            active[index].pending.removeFirst()
        }
        frame.bytes = bytes.count
        frame.sentAt = now
        active[index].inFlight.append(frame)
        results[work.batch].attempted += frame.range.count
        // The server has taken this device's positions, in this run or before a restart (its
        // cursor moved): the id need not wait for its answer alone.
        let cursor = batches[work.batch].cursor
        carried.connections[work.connection]?.exchange.queue(
            frame: bytes, eager: cursor.ackedSeq > 0 || ledger.window(for: cursor.deviceID) == nil)
        carried.connections[work.connection]?.lastProgress = now
        actions.append(.send(work.connection))
        return true
    }

    /// Identifies as the probe on a connection of its own: Traccar answers any id, so an answer
    /// proves the server is there and reading, and the record it closed on is at fault.
    private mutating func probe(_ index: Int) -> Bool {
        let id = newConnection(TeltonikaExchange(identification: TeltonikaProbe.identification))
        active[index].canary = id
        open(id)
        return true
    }

    /// Asks for a connection: every device's at once (their handshakes cost one round trip
    /// together); the first to fail ends the round.
    private mutating func open(_ id: ConnectionID) {
        guard !opening.contains(id) else { return }
        opening.insert(id)
        actions.append(.open(id))
    }

    private mutating func fail(_ index: Int, _ reason: String) {
        results[active[index].batch].unavailable = .unavailable(reason, retryAfter: nil, transport: true)
        active[index].done = true
        halted = true
    }

    private mutating func flush() {
        if !update.isEmpty { actions.append(.progress(update)) }
        update = DeliveryUpdate(destination: setup.destination)
    }

    /// The connection is finished: the driver drops it; a device may open it again (and identifies again).
    private mutating func close(_ id: ConnectionID) {
        if carried.connections[id]?.isOpen == true { actions.append(.close(id)) }
        reset(id)
    }

    /// Marks the connection closed, its protocol fresh for the next (a kept connection the server
    /// closed meanwhile goes through here alone: the driver dropped it already).
    private mutating func reset(_ id: ConnectionID) {
        guard var connection = carried.connections[id] else { return }
        connection.isOpen = false
        connection.exchange = TeltonikaExchange(identification: connection.exchange.identification)
        carried.connections[id] = connection
    }

    private mutating func retire(_ index: Int) {
        let work = active[index]
        if let canary = work.canary {
            close(canary)
            carried.connections[canary] = nil
        }
        // Only a connection that owes nothing is worth keeping.
        if let connection = carried.connections[work.connection], connection.isOpen, connection.exchange.isKnown,
            !connection.exchange.isAwaiting, !stopping
        {
            carried.idle[results[work.batch].deviceID] = (work.connection, carried.round)
        } else {
            close(work.connection)
            carried.connections[work.connection] = nil
        }
    }
}

import GeoRelayCore
import GeoRelaySpool

/// A push destination's round as a state machine without I/O: batches pipelined on one kept-alive
/// connection (`PipelinedLane`, shared with OsmAnd's round), each answer settled in the order the
/// batches went. `RoundDriver` does its I/O; what only the forwarder's task can do (plan the next
/// batch from the spool, compress, get a token) the round asks for (`need`) and the driver returns
/// to the caller (`PushRounds`), which answers with `supply`.
///
/// - A backlog's batches go as many at once as keep the link busy (`PipelineDepth`, at most
///   `batch.inFlight`), each planned as if those before it were delivered; a device's cursor
///   never passes a batch not yet answered.
/// - A batch not taken whole waits for every answer behind it, and then goes alone as the answer
///   requires: 401 with a fresh token (once), 413 and 400/422 halved (a position refused alone is
///   quarantined), 415 in the next weaker encoding (remembered). Nothing new is planned behind it.
/// - An answer that stops the round (no answer, a 503, a token refused twice) ends it: what the
///   gateway took behind it is settled out of turn, the rest goes again next round.
/// - A connection's first batch goes alone until an answer shows the gateway keeps connections
///   alive. A connection that ends before the oldest batch's answer began takes it once more on a
///   new one; twice, and it fails (it may be what the gateway cannot take).
struct PushRound: ConnectionRound {
    typealias ID = Int
    typealias Item = PushForwarder.Item

    private(set) var carried: Carried
    private let setup: Setup
    /// Unsettled batches, in the order they settle.
    private var entries: [Entry] = []
    private var nextID = 0
    private var token: String
    private(set) var need: Need?
    private(set) var outcome = Outcome()
    /// New batches may be asked for (a backlog's window).
    private var refill: Refill
    /// A batch was not taken whole: from here on one at a time, nothing new.
    private var resolving = false
    private var retriedAuth = false
    private var finished = false
    private var yielding = false
    private var stopping = false
    private var opening = false
    private var lastAnswerAt: RelayInstant?
    /// False between a return to the caller and the next poll: answers read then were waiting,
    /// and their spacing says nothing of the link.
    private var waited = true
    private var update: DeliveryUpdate
    private var cadence: ProgressCadence
    private var now: RelayInstant
    private var actions: [Action] = []

    typealias Action = ConnectionAction<Int>

    /// - Parameters:
    ///   - connected: whether the driver still holds the connection kept from the last round.
    ///   - refill: whether more batches are asked for behind `first`.
    init(
        _ first: Batch, token: String, setup: Setup, carried: Carried, connected: Bool, refill: Refill,
        now: RelayInstant
    ) {
        self.setup = setup
        self.carried = carried
        self.token = token
        self.now = now
        self.refill = refill
        cadence = ProgressCadence(now: now)
        update = DeliveryUpdate(destination: setup.destination)
        self.carried.lane.beginRound(connected: connected)
        entries.append(makeEntry(first))
    }

    var state: PushForwarder.DeliveryState { carried.state }

    // MARK: - ConnectionRound

    var isFinished: Bool { finished || (entries.isEmpty && need == nil && !carried.lane.isBusy && !opening) }

    /// Waiting for the caller's `supply`.
    var waitsForCaller: Bool { need != nil }

    var polled: [(id: Int, writing: Bool)] {
        carried.lane.connected && carried.lane.isBusy ? [(0, carried.lane.hasOutput)] : []
    }

    func output(of id: Int) -> (bytes: [UInt8], sent: Int)? { (carried.lane.output, carried.lane.sentBytes) }

    var deadline: RelayInstant? { carried.lane.isBusy ? carried.lane.lastProgress + setup.requestTimeout : nil }

    mutating func handle(_ event: ConnectionEvent<Int>, at now: RelayInstant, ledger: inout DeliveryLedger)
        -> [Action]
    {
        self.now = now
        actions.removeAll()
        guard !finished else { return actions }
        switch event {
        case .turn(let yield):
            yielding = yield
            if yield { refill = .none }
            settle(ledger: &ledger)
            fill(ledger: &ledger)
            askForMore()
        case .verified, .joined:
            break
        case .opened:
            opening = false
            carried.lane.opened(at: now)
            fill(ledger: &ledger)
        case .openFailed(_, let message):
            opening = false
            fail(message, ledger: &ledger)
        case .wrote(_, let count):
            carried.lane.wrote(count, at: now)
        case .received(_, let bytes):
            guard carried.lane.connected else { break }
            carried.lane.received(bytes, at: now)
            do throws(PipelineFault) {
                while let (id, http) = try carried.lane.nextAnswer(at: now) { answered(id, http) }
            } catch {
                fail(error.reason, ledger: &ledger)
            }
            settle(ledger: &ledger)
            fill(ledger: &ledger)
        case .peerClosed:
            while let (id, http) = carried.lane.answerAtClose(at: now) { answered(id, http) }
            if carried.lane.connected { closedUnanswered("closed", ledger: &ledger) }
            settle(ledger: &ledger)
            fill(ledger: &ledger)
        case .failed(_, let message):
            // A reset is how a server's close reaches us when pipelined requests were still
            // unread on its side: the same end of a connection, with no answer to take at it.
            closedUnanswered(message, ledger: &ledger)
            settle(ledger: &ledger)
            fill(ledger: &ledger)
        case .tick:
            waited = true
            if carried.lane.timedOut(at: now, after: setup.requestTimeout) {
                fail("no answer in \(setup.requestTimeout.components.seconds) s", ledger: &ledger)
            }
        case .stop:
            stopping = true
        }
        return actions
    }

    mutating func finish() -> [Action] {
        actions.removeAll()
        if stopping, !finished {
            // Abandoned: what is on the wire may have reached the gateway; the spool still has it.
            outcome.abandoned += entries.filter { $0.sentAt != nil && $0.answer == nil }.reduce(0) {
                $0 + $1.batch.items.count
            }
            close()
            entries.removeAll()
        }
        finished = true
        flush(force: true)
        return actions
    }

    // MARK: - The caller's part

    /// Answers `need`.
    mutating func supply(_ supply: Supply, ledger: inout DeliveryLedger) {
        guard let asked = need else { return }
        need = nil
        waited = false
        switch (asked, supply) {
        case (.batch, .batch(let batch, let fresh)):
            token = fresh
            entries.append(makeEntry(batch))
        case (.bodies(let chunks, let encoding), .bodies(let bodies)) where bodies.count == chunks.count:
            let head = entries[0].batch
            let batches = zip(chunks, bodies).map { chunk, encoded in
                Batch(
                    items: Array(chunk), body: encoded.body, encoding: encoding, compression: encoded.compression,
                    full: head.full, ahead: head.ahead)
            }
            entries.replaceSubrange(0..<1, with: batches.map { makeEntry($0) })
        case (.token, .token(let fresh)):
            token = fresh
            resendHead()
        case (.batch, _):
            refill = .none
        case (_, .none(let stop)):
            end(stop, ledger: &ledger)
        default:
            preconditionFailure("PushRound: \(supply) does not answer \(asked)")
        }
    }

    // MARK: - Sending

    private mutating func makeEntry(_ batch: Batch) -> Entry {
        nextID += 1
        return Entry(id: nextID, batch: batch, token: token)
    }

    private var onWire: Int { carried.lane.inFlight.count }

    /// How many batches may be on the wire: one until the gateway shows it keeps connections
    /// alive, or while a batch not taken whole is being resolved; else what keeps the link busy,
    /// sized by the largest batch (a window opened by a few current positions is not to fill
    /// with eight full ones).
    private var window: Int {
        guard carried.keepsAlive == true, !resolving else { return 1 }
        return carried.depth.depth(batchBytes: entries.map(\.batch.body.count).max() ?? 0)
    }

    /// Puts the batches waiting to go on the wire, within the window, asking for the connection first.
    private mutating func fill(ledger: inout DeliveryLedger) {
        guard !finished, need == nil else { return }
        guard carried.lane.startOutput() else { return actions.append(.send(0)) }
        // A resolved batch goes when the connection has nothing else on it.
        if resolving, onWire > 0 { return }
        while onWire < window, let index = entries.firstIndex(where: { $0.sentAt == nil }) {
            guard carried.lane.connected else {
                if !opening {
                    opening = true
                    actions.append(.open(0))
                }
                return
            }
            var entry = entries[index]
            let headers = setup.wire.headers(encoding: entry.batch.encoding, token: entry.token)
            do throws(HTTP1RequestError) {
                entry.requestBytes = try HTTP1Request(method: "POST", target: setup.target, headers: headers).append(
                    body: entry.batch.body, to: &carried.lane.output)
            } catch {
                // A header value that cannot go on the wire (a token with a line break).
                return fail("a request header cannot be sent: \(error)", ledger: &ledger)
            }
            entry.sentAt = now
            entry.behindAnother = onWire > 0
            update.payloadBytes += entry.requestBytes
            entries[index] = entry
            carried.lane.inFlight.append(entry.id)
        }
        if carried.lane.hasOutput { actions.append(.send(0)) }
    }

    /// Asks for the next batch while the link has room for it.
    private mutating func askForMore() {
        guard refill != .none, !resolving, !finished, need == nil, carried.keepsAlive != false,
            !entries.contains(where: { $0.sentAt == nil }), entries.count < window
        else { return }
        guard case .trial(let bytes) = refill else {
            need = .batch(maxBytes: nil)
            return
        }
        if entries.count < 2 { need = .batch(maxBytes: bytes) }
    }

    // MARK: - Answers

    /// Takes an answer off the connection: it waits in its batch for its turn to settle.
    private mutating func answered(_ id: Int, _ parsed: HTTP1Response) {
        guard let index = entries.firstIndex(where: { $0.id == id }), let sentAt = entries[index].sentAt else { return }
        var http = parsed.response
        http.wireBytes += entries[index].requestBytes
        update.payloadBytes += parsed.response.wireBytes
        entries[index].answer = http
        // A connection's first answer says whether the gateway keeps connections alive (one that
        // closes after many answers, as nginx does after `keepalive_requests`, still does).
        if carried.lane.answeredOnConnection == 1 { carried.keepsAlive = parsed.keepAlive }
        let spacing = entries[index].behindAnother && waited ? lastAnswerAt.map { now - $0 } : nil
        carried.depth.answered(bytes: entries[index].batch.body.count, elapsed: now - sentAt, spacing: spacing)
        lastAnswerAt = now
        carried.state.planner.record(entries[index].batch.compression)
        entries[index].batch.compression = nil
        if let secondsPerByte = carried.depth.secondsPerByte {
            carried.state.planner.recordLinkRate(secondsPerByte: secondsPerByte)
        } else {
            carried.state.planner.recordUpload(bytes: http.wireBytes, seconds: (now - sentAt) / .seconds(1))
        }
        if !parsed.keepAlive {
            // Batches written behind an answer that ends the connection were not read: they go
            // again on the next connection, one at a time if the gateway ends every connection so.
            for behind in carried.lane.inFlight {
                if let at = entries.firstIndex(where: { $0.id == behind }) { entries[at].sentAt = nil }
            }
            close()
        }
    }

    /// The connection ended with batches unanswered and nothing of the oldest's answer: they go
    /// again on a new one; the oldest a second time fails.
    private mutating func closedUnanswered(_ how: String, ledger: inout DeliveryLedger) {
        let partial = carried.lane.parser.bufferedBytes > 0
        let unanswered = carried.lane.inFlight
        // A gateway that ends a connection after its first answer with batches behind it gets
        // one at a time; a keep-alive limit (nginx's 1,000) only a new connection.
        if carried.lane.answeredOnConnection <= 1, unanswered.count > 1 { carried.keepsAlive = false }
        close()
        guard let head = unanswered.first, let at = entries.firstIndex(where: { $0.id == head }) else { return }
        if partial {
            return fail("the connection ended inside an answer (\(how))", ledger: &ledger)
        }
        if entries[at].retried {
            return fail("the server ended the connection twice without answering (\(how))", ledger: &ledger)
        }
        entries[at].retried = true
        for id in unanswered {
            if let index = entries.firstIndex(where: { $0.id == id }) { entries[index].sentAt = nil }
        }
    }

    /// Settles answered batches from the oldest, stopping at one not taken whole until its
    /// resolution is on its way.
    private mutating func settle(ledger: inout DeliveryLedger) {
        while !finished, need == nil, let head = entries.first, let http = head.answer {
            let result = setup.wire.outcome(of: .success(http))
            guard result != .delivered else {
                entries.removeFirst()
                if let settled = head.batch.settled, !settled.isEmpty {
                    emit(settled)
                    ledger.apply(settled)
                }
                update.drain = head.batch.full
                for item in head.batch.items { ledger.delivered(item.delivery, into: &update) }
                outcome.delivered += head.batch.items.count
                // The trial is answered: the window from here.
                if case .trial = refill { refill = .window }
                flush(force: false)
                continue
            }
            resolving = true
            refill = .none
            // Its halves or retry need the connection to themselves: every answer behind it first.
            guard onWire == 0 else { return }
            resolve(head, result, ledger: &ledger)
        }
    }

    /// What a batch not taken whole needs next.
    private mutating func resolve(_ head: Entry, _ result: PushOutcome, ledger: inout DeliveryLedger) {
        if yielding { return end(nil, ledger: &ledger) }
        let items = head.batch.items
        let ids = items[...]
        switch result {
        case .delivered:
            break
        case .tooLarge where items.count > 1:
            carried.state.maxPositions = max(1, items.count / 2)
            setup.logger.warning(
                "HTTP 413 for \(items.count) positions: batches now hold at most \(carried.state.maxPositions)")
            need = .bodies(halves(ids), carried.state.encoding)
        case .badBatch where items.count > 1:
            need = .bodies(halves(ids), carried.state.encoding)
        case .tooLarge, .badBatch:
            let reason =
                result == .tooLarge ? "HTTP 413 for a single position" : "refused by the server (HTTP 400/422)"
            entries.removeFirst()
            ledger.refused(items[0].delivery, reason: reason, logger: setup.logger, into: &update)
            outcome.refused += 1
            flush(force: false)
            // The batches behind a refused position sent ahead were planned as if it were
            // delivered, and skip its backlog turn: they are planned again.
            if head.batch.ahead { end(nil, ledger: &ledger) }
        case .unsupportedEncoding where head.batch.encoding != carried.state.encoding:
            // Sent before an earlier batch's 415 moved to a weaker encoding: again, in that one.
            need = .bodies([ids], carried.state.encoding)
        case .unsupportedEncoding:
            guard let weaker = carried.state.encoding.weaker else {
                return end(
                    .unavailable("HTTP 415 even for an uncompressed JSON body", retryAfter: nil, transport: false),
                    ledger: &ledger)
            }
            setup.logger.warning(
                "HTTP 415 for Content-Encoding \(carried.state.encoding.rawValue): falling back to \(weaker.rawValue)")
            carried.state.encoding = weaker
            update.encoding = weaker.rawValue
            need = .bodies([ids], weaker)
        case .unauthorized where head.token != token:
            // Sent with a token an earlier batch's 401 has replaced already: again, with the new one.
            resendHead()
        case .unauthorized:
            guard !retriedAuth else {
                return end(.auth(.rejected("push refused the token twice (HTTP 401)")), ledger: &ledger)
            }
            retriedAuth = true
            need = .token(refused: head.token)
        case .unavailable(let reason, let retryAfter, let transport):
            end(.unavailable(reason, retryAfter: retryAfter, transport: transport), ledger: &ledger)
        }
    }

    private func halves(_ items: ArraySlice<Item>) -> [ArraySlice<Item>] {
        let middle = items.startIndex + items.count / 2
        return [items[..<middle], items[middle...]]
    }

    /// The oldest batch goes again, with the current token.
    private mutating func resendHead() {
        entries[0].answer = nil
        entries[0].sentAt = nil
        entries[0].token = token
    }

    /// The link failed the round (`Stop.unavailable` below TCP's or HTTP's answer).
    private mutating func fail(_ reason: String, ledger: inout DeliveryLedger) {
        end(.unavailable(reason, retryAfter: nil, transport: true), ledger: &ledger)
    }

    /// Ends the round (`stop` nil: nothing failed, it just goes no further): what the gateway took
    /// behind the oldest unsettled batch is settled out of turn, the rest goes again.
    private mutating func end(_ stop: Stop?, ledger: inout DeliveryLedger) {
        guard !finished else { return }
        finished = true
        need = nil
        outcome.stop = stop
        if onWire > 0 { close() }
        var taken = 0
        for entry in entries.dropFirst() {
            guard let http = entry.answer, setup.wire.outcome(of: .success(http)) == .delivered else { continue }
            for item in entry.batch.items { ledger.deliveredOutOfTurn(item.delivery, into: &update) }
            taken += entry.batch.items.count
        }
        let dropped = entries.reduce(0) { $0 + $1.batch.items.count } - taken
        if taken > 0 {
            setup.logger.info("\(taken) positions the gateway took behind a batch not delivered are settled")
            outcome.delivered += taken
        }
        if dropped > 0, entries.count > 1 {
            setup.logger.info("\(dropped) positions in batches behind one not delivered go again")
        }
        entries.removeAll()
        flush(force: true)
    }

    private mutating func close() {
        carried.lane.inFlight.removeAll()
        guard carried.lane.connected else { return }
        carried.lane.close()
        actions.append(.close(0))
    }

    private mutating func emit(_ settled: DeliveryUpdate) {
        flush(force: true)
        actions.append(.progress(settled))
    }

    private mutating func flush(force: Bool) {
        if cadence.due(update, force: force, now: now) {
            actions.append(.progress(update))
            update = DeliveryUpdate(destination: setup.destination)
        }
    }
}

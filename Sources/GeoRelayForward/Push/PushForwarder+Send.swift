import GeoRelayCore
import GeoRelaySpool

/// Sending: a window of batches on the wire, and one batch's answers (splitting it as they require).
extension PushForwarder {
    enum Stop {
        case auth(PushAuthError)
        case unavailable(String, retryAfter: Double?, transport: Bool)
    }

    struct SendResult {
        var stop: Stop?
        /// Every position of the batch was delivered or quarantined.
        var advancedAll = false
        /// Positions the gateway refused for good.
        var refused = 0
        /// Positions the gateway took.
        var delivered = 0
    }

    /// A batch on the wire, and its answer once taken off the connection.
    private struct InFlight {
        var prepared: Prepared
        /// The token it went with (a 401 to it is not a 401 to a newer one).
        var token: String
        var bytes: Int
        var sentAt: RelayInstant
        /// Went while another was still unanswered: its answer's spacing measures the link.
        var behindAnother: Bool
        /// Planned as if every batch before it were delivered: its skipped positions settle in its turn.
        var speculative: Bool
        var answer: Result<HTTPResponse, CurlError>?
    }

    /// Sends `first` and, when `refill` holds the route it was planned on, the next full batches
    /// behind it on the same connection (alarms and current positions among them, in their turn),
    /// as many at once as keep the link busy (`PipelineDepth`, at most `batch.inFlight`). Each is
    /// planned as if those before it were delivered, and their answers are settled in order, so a
    /// device's cursor never passes a batch not yet answered. A batch not taken whole first waits
    /// for every answer behind it, so its halves or retry go alone; one that stops the round (no
    /// answer, a 503, a token refused twice) ends the window: what the gateway took behind it is
    /// settled (`settleTakenBehind`), the rest goes again.
    func sendWindow(
        _ first: Prepared, token initialToken: String, state initial: DeliveryState, ledger: inout DeliveryLedger,
        depth: inout PipelineDepth, order: inout DrainOrder, refill route: Int?
    ) async -> (SendResult, DeliveryState) {
        var state = initial
        var token = initialToken
        var window: [InFlight] = []
        var assumed = ledger.assuming(first.items.map(\.delivery))
        var refilling = route != nil
        var lastAnswerAt: RelayInstant?
        /// Taken by the gateway in this window's earlier batches.
        var delivered = 0
        /// When current positions last went ahead in this window.
        var currentAheadAt: RelayInstant?
        func carriesCurrent(_ prepared: Prepared) -> Bool {
            prepared.items.contains { $0.delivery.kind == .ahead && $0.delivery.stored.position.alarm == nil }
        }
        if carriesCurrent(first) { currentAheadAt = clock.now() }
        func submit(_ prepared: Prepared, speculative: Bool) async {
            await transport.submit(wire.request(body: prepared.body, encoding: prepared.encoding, token: token))
            window.append(
                InFlight(
                    prepared: prepared, token: token, bytes: prepared.body.count, sentAt: clock.now(),
                    behindAnother: window.contains { $0.answer == nil }, speculative: speculative))
        }
        await submit(first, speculative: false)
        while !window.isEmpty {
            // Sized by the largest batch on the wire: a window opened by a few current positions
            // is not to fill with eight full batches.
            while refilling, window.count < depth.depth(batchBytes: window.map(\.bytes).max() ?? first.body.count) {
                // Live fixes go ahead again only every so often while the backlog drains: with many
                // units one arrives every few hundred milliseconds, and each batch of them costs a
                // read of every device's backlog and a request (`DrainOrder.currentDue`).
                let currentDue = order.currentDue(
                    at: clock.now(), lastAheadAt: currentAheadAt, roundTrip: depth.roundTrip)
                guard !Task.isCancelled, await transport.pipelines, gate?.restriction(for: settings.name) == nil,
                    gate?.bytesLeft(for: settings.name) == nil,
                    (gate?.routeGeneration(for: settings.name) ?? 0) == route,
                    let next = try? await prepare(ledger: assumed, state: state, currentAhead: currentDue),
                    // Live fixes ride in the window, small as they are; the backlog behind them goes on.
                    next.full || next.kind == .current, next.encoding == state.encoding,
                    next.items.count <= state.maxPositions,
                    // A replay goes when nothing live waits, alone.
                    !next.items.contains(where: { $0.delivery.kind == .replay })
                else {
                    refilling = false
                    break
                }
                // A window that outlasts the token's refresh point (a long backlog over a slow
                // link) sends its next batches with the new token, not the old one to its expiry.
                guard let fresh = try? await auth.token() else {
                    refilling = false
                    break
                }
                token = fresh
                order.observe(next.kind, backfilling: next.backfilling, at: clock.now())
                assumed.apply(next.settled)
                assumed = assumed.assuming(next.items.map(\.delivery))
                if carriesCurrent(next) { currentAheadAt = clock.now() }
                await submit(next, speculative: true)
            }
            var sent = window.removeFirst()
            if sent.answer == nil {
                sent.answer = await transport.next(unlessAbandoned: shutdown.abandoned)
                // Only answers measure the link: a connection refused at once is no round trip.
                if case .success(let http) = sent.answer {
                    // An answer already there when it was read (while the next batch was being
                    // prepared) came in some time before: spaced from the one before by when it was
                    // read, it made the link look five times faster than it is. Only answers the
                    // reader waited for time the link.
                    let spacing =
                        sent.behindAnother ? http.arrivedAt.flatMap { at in lastAnswerAt.map { at - $0 } } : nil
                    depth.answered(
                        bytes: sent.bytes, elapsed: (http.arrivedAt ?? clock.now()) - sent.sentAt, spacing: spacing)
                    lastAnswerAt = http.arrivedAt
                }
            }
            let answer = sent.answer!
            if let secondsPerByte = depth.secondsPerByte {
                state.planner.recordLinkRate(secondsPerByte: secondsPerByte)
            } else if case .success(let http) = answer {
                state.planner.recordUpload(bytes: http.wireBytes, seconds: (clock.now() - sent.sentAt) / .seconds(1))
            }
            if wire.outcome(of: answer) != .delivered {
                // Its halves or retry need the connection to themselves: take in what is behind it,
                // and send nothing more behind them this round.
                await takeAnswers(&window, after: answer)
                refilling = false
            }
            if sent.speculative, !sent.prepared.settled.isEmpty {
                recorder.record(sent.prepared.settled)
                ledger.apply(sent.prepared.settled)
            }
            var (result, newState) = await send(
                sent.prepared, token: &token, state: state, ledger: &ledger, first: answer, firstToken: sent.token)
            state = newState
            delivered += result.delivered
            result.delivered = delivered
            // A position refused when sent ahead is to be quarantined in its backlog turn, which
            // the batches behind it, planned as if it were delivered, skip: they are planned again.
            let refusedAhead = result.refused > 0 && sent.prepared.items.contains { $0.delivery.kind == .ahead }
            if result.stop != nil || !result.advancedAll || refusedAhead {
                // Answers not taken in are dropped with the connection; a drained one is kept.
                if window.contains(where: { $0.answer == nil }) { await transport.reset() }
                let taken = settleTakenBehind(window, ledger: &ledger)
                result.delivered += taken
                let dropped = window.reduce(0) { $0 + $1.prepared.items.count } - taken
                if taken > 0 {
                    logger.info("\(taken) positions the gateway took behind a batch not delivered are settled")
                }
                if dropped > 0 { logger.info("\(dropped) positions in batches behind one not delivered go again") }
                return (result, state)
            }
        }
        return (SendResult(stop: nil, advancedAll: true, delivered: delivered), state)
    }

    /// Settles the batches behind a failed one that the gateway answered 2xx, out of turn
    /// (`DeliveryLedger.deliveredOutOfTurn`): the failed batch before them goes again. Their
    /// filter-skipped positions are not settled (they were planned as if the failed batch were
    /// delivered); the backlog plans them again. Returns how many positions it settled.
    private func settleTakenBehind(_ window: [InFlight], ledger: inout DeliveryLedger) -> Int {
        var update = DeliveryUpdate(destination: settings.name)
        var settled = 0
        for sent in window {
            guard let answer = sent.answer, case .success(let http) = answer, wire.outcome(of: answer) == .delivered
            else { continue }
            update.payloadBytes += http.wireBytes
            for item in sent.prepared.items { ledger.deliveredOutOfTurn(item.delivery, into: &update) }
            settled += sent.prepared.items.count
        }
        guard settled > 0 else { return 0 }
        recorder.record(update)
        return settled
    }

    /// Takes the answers of every batch still on the wire (after a failure, the same failure for
    /// each: the connection took them with it).
    private func takeAnswers(_ window: inout [InFlight], after answer: Result<HTTPResponse, CurlError>) async {
        var failure: CurlError?
        if case .failure(let error) = answer { failure = error }
        for index in window.indices where window[index].answer == nil {
            if let failure {
                window[index].answer = .failure(failure)
                continue
            }
            let answer = await transport.next(unlessAbandoned: shutdown.abandoned)
            if case .failure(let error) = answer { failure = error }
            window[index].answer = answer
        }
    }

    /// Sends a batch, splitting it as the answers require, until all of it is
    /// delivered or quarantined, or the destination stops taking anything.
    /// What the answers settle goes into `ledger` and, through it, to the spool.
    /// - Parameters:
    ///   - first: the answer to the whole batch, sent already (in a window) with `firstToken`.
    func send(
        _ prepared: Prepared, token: inout String, state initial: DeliveryState,
        ledger: inout DeliveryLedger, first: Result<HTTPResponse, CurlError>?, firstToken: String? = nil
    ) async -> (SendResult, DeliveryState) {
        let batch = prepared.items
        var state = initial
        var result = SendResult()
        var handled = 0
        var retriedAuth = false
        // Chunks still to send, the next at the end.
        var pending: [ArraySlice<Item>] = []
        var start = 0
        // Sent already, the batch is one chunk whatever a 413 since has made of the size.
        if first != nil {
            pending.append(batch[...])
            start = batch.count
        }
        while start < batch.count {
            pending.append(batch[start..<min(batch.count, start + state.maxPositions)])
            start += state.maxPositions
        }
        pending.reverse()
        var first = first
        while let chunk = pending.popLast() {
            // Once sent, a batch's answer is taken in even when the task is being cancelled.
            if Task.isCancelled, first == nil { break }
            var update = DeliveryUpdate(destination: settings.name)
            // A full batch is a backlog draining: its progress is committed within a second.
            update.drain = prepared.full
            defer { recorder.record(update) }
            let response: Result<HTTPResponse, CurlError>
            let sentEncoding: PushSettings.Compression
            let sentToken: String
            if let answer = first {
                first = nil
                response = answer
                sentEncoding = prepared.encoding
                sentToken = firstToken ?? token
                state.planner.record(prepared.compression)
            } else {
                let body: [UInt8]
                do {
                    // The prepared body serves when the chunk is the whole batch in the same encoding.
                    if chunk.count == batch.count, prepared.encoding == state.encoding, !prepared.body.isEmpty {
                        body = prepared.body
                        state.planner.record(prepared.compression)
                    } else {
                        let encoded = try await encode(chunk, encoding: state.encoding, planner: state.planner)
                        body = encoded.body
                        state.planner.record(encoded.measurement)
                    }
                } catch {
                    result.stop = .unavailable("cannot compress a batch: \(error)", retryAfter: nil, transport: false)
                    break
                }
                let sentAt = clock.monotonicNs()
                sentEncoding = state.encoding
                sentToken = token
                // Finishing, the batch on the wire still gets its answer; only an abandon drops it.
                await transport.submit(wire.request(body: body, encoding: state.encoding, token: token))
                response = await transport.next(unlessAbandoned: shutdown.abandoned)
                if case .success(let http) = response {
                    state.planner.recordUpload(
                        bytes: http.wireBytes, seconds: Double(clock.monotonicNs() &- sentAt) / 1e9)
                }
            }
            if shutdown.abandoned.isSet, case .failure = response {
                logger.warning(
                    "abandoned a batch of \(chunk.count) positions in flight, unanswered; it goes again, so the gateway may get it twice"
                )
                spool.add(counters: ["forward.abandoned.\(settings.name)": Int64(chunk.count)])
                break
            }
            if case .success(let http) = response { update.payloadBytes += http.wireBytes }
            switch wire.outcome(of: response) {
            case .delivered:
                for item in chunk { ledger.delivered(item.delivery, into: &update) }
                handled += chunk.count
                result.delivered += chunk.count
            case .tooLarge where chunk.count > 1:
                state.maxPositions = max(1, chunk.count / 2)
                logger.warning("HTTP 413 for \(chunk.count) positions: batches now hold at most \(state.maxPositions)")
                pending.append(contentsOf: halves(chunk).reversed())
            case .badBatch where chunk.count > 1:
                pending.append(contentsOf: halves(chunk).reversed())
            case .tooLarge, .badBatch:
                let reason =
                    wire.outcome(of: response) == .tooLarge
                    ? "HTTP 413 for a single position" : "refused by the server (HTTP 400/422)"
                ledger.refused(chunk[chunk.startIndex].delivery, reason: reason, logger: logger, into: &update)
                handled += 1
                result.refused += 1
            case .unsupportedEncoding where sentEncoding != state.encoding:
                // Sent before an earlier batch's 415 moved to a weaker encoding: again, in that one.
                pending.append(chunk)
            case .unsupportedEncoding:
                guard let weaker = state.encoding.weaker else {
                    result.stop = .unavailable(
                        "HTTP 415 even for an uncompressed JSON body", retryAfter: nil, transport: false)
                    pending.removeAll()
                    break
                }
                logger.warning(
                    "HTTP 415 for Content-Encoding \(state.encoding.rawValue): falling back to \(weaker.rawValue)")
                state.encoding = weaker
                update.encoding = weaker.rawValue
                pending.append(chunk)
            case .unauthorized where sentToken != token:
                // Sent with a token an earlier batch's 401 has replaced already: again, with the new one.
                pending.append(chunk)
            case .unauthorized:
                await auth.invalidate(token)
                guard !retriedAuth else {
                    result.stop = .auth(.rejected("push refused the token twice (HTTP 401)"))
                    pending.removeAll()
                    break
                }
                retriedAuth = true
                do {
                    token = try await auth.token()
                    pending.append(chunk)
                } catch {
                    result.stop = .auth(error)
                    pending.removeAll()
                }
            case .unavailable(let reason, let retryAfter, let transport):
                result.stop = .unavailable(reason, retryAfter: retryAfter, transport: transport)
                pending.removeAll()
            }
        }
        result.advancedAll = handled == batch.count
        return (result, state)
    }

    private func halves(_ chunk: ArraySlice<Item>) -> [ArraySlice<Item>] {
        let middle = chunk.startIndex + chunk.count / 2
        return [chunk[chunk.startIndex..<middle], chunk[middle..<chunk.endIndex]]
    }

    /// JSON, then the chosen compression, off the cooperative pool.
    func encode(_ chunk: ArraySlice<Item>, encoding: PushSettings.Compression, planner: CompressionPlanner) async throws
        -> (body: [UInt8], measurement: CompressionMeasurement?)
    {
        let (wire, points, clock) = (self.wire, chunk.map(\.point), self.clock)
        return try await encoder.run { zstd in
            let json = wire.encodeBatch(points)
            switch encoding {
            case .none: return (json, nil)
            case .gzip: return (try Gzip.compress(json), nil)
            case .zstd:
                let level = planner.level(forJSONBytes: json.count)
                let started = clock.monotonicNs()
                let body = try zstd.compress(json, level: level)
                let seconds = Double(clock.monotonicNs() &- started) / 1e9
                return (
                    body,
                    CompressionMeasurement(
                        level: level, jsonBytes: json.count, compressedBytes: body.count, seconds: seconds)
                )
            }
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

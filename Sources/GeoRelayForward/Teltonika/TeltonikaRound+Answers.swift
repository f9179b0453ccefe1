import GeoRelayCore
import GeoRelaySpool

/// What the answers on a round's connections settle: a frame's count, the id's answer, a break,
/// and the probe's verdict on a position that closed the connection.
extension TeltonikaRound {
    mutating func deliver(_ event: TeltonikaExchange.Event, on id: ConnectionID, ledger: inout DeliveryLedger) {
        if let index = active.firstIndex(where: { $0.canary == id }) {
            settleProbe(index, event, ledger: &ledger)
        } else if let index = active.firstIndex(where: { $0.connection == id }) {
            settle(index, event, ledger: &ledger)
        }
    }

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

    /// What an event on the work's own connection settles. Never sends: `advance` does.
    private mutating func settle(_ index: Int, _ event: TeltonikaExchange.Event, ledger: inout DeliveryLedger) {
        let batch = active[index].batch
        switch event {
        case .identified(.known):
            break
        case .identified(.unknown):
            let at = active[index].inFlight.first?.range.lowerBound ?? active[index].next
            active[index].inFlight.removeAll()
            if setup.buffered {
                _ = ledger.settle(
                    .unknownDevice("Traccar's Teltonika port does not know the device (identification answered 0x00)"),
                    at..<(at + 1), of: batches[batch], result: &results[batch], parkSeconds: setup.parkSeconds,
                    logger: setup.logger, into: &update)
                flush()
            }
            close(active[index].connection)
            active[index].done = true
        case .acknowledged(let count):
            guard !active[index].inFlight.isEmpty else { return }
            let frame = active[index].inFlight.removeFirst()
            // An answer that came while the frame waited on the wire behind the one answered
            // before it measures the link's rate; one sent after that answer, the round trip.
            let spacing = active[index].lastAnswer.flatMap { frame.sentAt < $0 ? now - $0 : nil }
            carried.depth.answered(bytes: frame.bytes, elapsed: now - frame.sentAt, spacing: spacing)
            active[index].lastAnswer = now
            guard count == frame.range.count else {
                close(active[index].connection)
                active[index].inFlight.removeAll()
                return fail(index, "Traccar answered \(count) to a frame of \(frame.range.count) records")
            }
            if setup.buffered {
                _ = ledger.settle(
                    .delivered, frame.range, of: batches[batch], result: &results[batch],
                    parkSeconds: setup.parkSeconds, logger: setup.logger, into: &update)
            } else {
                update.sent += count
                results[batch].delivered += count
            }
            flush()
        case .broken(let reason):
            guard let frame = active[index].inFlight.first else { return }
            // The frames behind the first unanswered one are not suspect: they go again as they
            // were, after whatever the suspect becomes.
            let behind = active[index].inFlight.dropFirst().map { Frame(range: $0.range, attempt: $0.attempt) }
            active[index].inFlight.removeAll()
            active[index].lastAnswer = nil
            guard setup.buffered else {
                // Real-time only: tried once; the device's rest of this round is dropped with it.
                active[index].done = true
                return
            }
            active[index].pending.insert(contentsOf: behind, at: 0)
            switch reason {
            case .closedUnanswered where frame.attempt == .first:
                active[index].pending.insert(Frame(range: frame.range, attempt: .retry), at: 0)
            case .closedUnanswered where frame.range.count > 1:
                let middle = frame.range.lowerBound + frame.range.count / 2
                active[index].pending.insert(
                    contentsOf: [
                        Frame(range: frame.range.lowerBound..<middle, attempt: .split),
                        Frame(range: middle..<frame.range.upperBound, attempt: .split),
                    ], at: 0)
            case .closedUnanswered:
                active[index].suspect = frame.range.lowerBound
            case .notTraccar(let message), .failed(let message):
                fail(index, message)
            }
        }
    }
}

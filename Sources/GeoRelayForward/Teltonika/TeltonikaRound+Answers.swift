import GeoRelayCore
import GeoRelaySpool

/// What an event on a device's own connection settles (a frame's count, the id's answer, a
/// break), as a verdict the round acts on: the work changes itself and the ledger, never the
/// round's other state, and never sends (`TeltonikaRound.advance` does).
extension TeltonikaRound.Work {
    struct Verdict {
        /// The connection is finished (the id was refused, or an answer counted wrong).
        var close = false
        /// The link (or something on it) failed: the round ends and the destination backs off.
        var failure: String?
        /// Something was settled: hand it over.
        var flush = false
    }

    /// The round's parts an answer settles into.
    struct Settling {
        let batch: DeviceBatch
        let setup: TeltonikaRound.Setup
        /// When the event came.
        let at: RelayInstant
        var result: DeviceResult
        var update: DeliveryUpdate
        var depth: PipelineDepth
    }

    mutating func settle(
        _ event: TeltonikaExchange.Event, _ s: inout Settling, ledger: inout DeliveryLedger
    ) -> Verdict {
        var verdict = Verdict()
        switch event {
        case .identified(.known):
            break
        case .identified(.unknown):
            let at = inFlight.first?.range.lowerBound ?? next
            inFlight.removeAll()
            if s.setup.buffered {
                _ = ledger.settle(
                    .unknownDevice("Traccar's Teltonika port does not know the device (identification answered 0x00)"),
                    at..<(at + 1), of: s.batch, result: &s.result, parkSeconds: s.setup.parkSeconds,
                    logger: s.setup.logger, into: &s.update)
                verdict.flush = true
            }
            verdict.close = true
            done = true
        case .acknowledged(let count):
            guard !inFlight.isEmpty else { break }
            let frame = inFlight.removeFirst()
            // An answer that came while the frame waited on the wire behind the one answered
            // before it measures the link's rate; one sent after that answer, the round trip.
            let spacing = lastAnswer.flatMap { frame.sentAt < $0 ? s.at - $0 : nil }
            s.depth.answered(bytes: frame.bytes, elapsed: s.at - frame.sentAt, spacing: spacing)
            lastAnswer = s.at
            guard count == frame.range.count else {
                inFlight.removeAll()
                verdict.close = true
                verdict.failure = "Traccar answered \(count) to a frame of \(frame.range.count) records"
                break
            }
            if s.setup.buffered {
                _ = ledger.settle(
                    .delivered, frame.range, of: s.batch, result: &s.result, parkSeconds: s.setup.parkSeconds,
                    logger: s.setup.logger, into: &s.update)
            } else {
                s.update.sent += count
                s.result.delivered += count
            }
            verdict.flush = true
        case .broken(let reason):
            guard let frame = inFlight.first else {
                // An identification sent alone, unanswered: the link, as for any frame's id.
                switch reason {
                case .closedUnanswered: verdict.failure = "the server closed the connection unanswered"
                case .notTraccar(let message), .failed(let message): verdict.failure = message
                }
                break
            }
            // The frames behind the first unanswered one are not suspect: they go again as they
            // were, after whatever the suspect becomes.
            let behind = inFlight.dropFirst().map { TeltonikaRound.Frame(range: $0.range, attempt: $0.attempt) }
            inFlight.removeAll()
            lastAnswer = nil
            guard s.setup.buffered else {
                // Real-time only: tried once; the device's rest of this round is dropped with it.
                done = true
                break
            }
            pending.insert(contentsOf: behind, at: 0)
            switch reason {
            case .closedUnanswered where frame.attempt == .first:
                pending.insert(TeltonikaRound.Frame(range: frame.range, attempt: .retry), at: 0)
            case .closedUnanswered where frame.range.count > 1:
                let middle = frame.range.lowerBound + frame.range.count / 2
                pending.insert(
                    contentsOf: [
                        TeltonikaRound.Frame(range: frame.range.lowerBound..<middle, attempt: .split),
                        TeltonikaRound.Frame(range: middle..<frame.range.upperBound, attempt: .split),
                    ], at: 0)
            case .closedUnanswered:
                suspect = frame.range.lowerBound
            case .notTraccar(let message), .failed(let message):
                verdict.failure = message
            }
        }
        return verdict
    }
}

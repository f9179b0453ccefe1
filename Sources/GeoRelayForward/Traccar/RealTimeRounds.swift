import GeoRelayCore
import GeoRelaySpool

/// A real-time destination's rounds (`buffer: false`) behind its loop (`DestinationLoop`): each
/// new position is tried once when it arrives and dropped on failure, as the Traccar client does
/// with its buffer off. Nothing queues, so nothing is settled in the spool: its own ledger keeps
/// only the filter's memory. What is tried is the planner's (`RoundPlanner.realTime`).
///
/// Used by the loop's task alone.
final class RealTimeRounds: DestinationRounds {
    private let forwarder: TraccarForwarder
    /// The spool's newest seq already seen: nil until the first round reads where the spool ends.
    private var after: Int64?
    private var ledger: DeliveryLedger

    init(_ forwarder: TraccarForwarder) {
        self.forwarder = forwarder
        ledger = DeliveryLedger(destination: forwarder.settings.name)
    }

    func routeMoved() async {
        await forwarder.engine.run { $0.closeConnections() }
    }

    func linkFailed() {}

    func round(_ turn: DestinationLoop.Turn, order: inout DrainOrder) async -> DestinationLoop.Report {
        let f = forwarder
        guard let from = after else {
            // Only what arrives from now on is tried.
            do {
                after = try await f.reader.run { try $0.newestSeq() }
                return .ready
            } catch {
                f.logger.error("cannot read the spool: \(error)")
                return .idle(.seconds(5))
            }
        }
        guard let batch = try? await f.reader.run({ try $0.positions(after: from, limit: 10_000) }),
            let last = batch.last
        else { return .idle(.seconds(30)) }
        after = last.seq
        let (batches, attempted) = RoundPlanner.realTime(
            batch, ledger: &ledger, filter: f.filter, restriction: turn.restriction)
        let results = await f.send(batches, mode: .realTime, ledger: &ledger)
        let delivered = results.reduce(0) { $0 + $1.delivered }
        return .triedOnce(delivered: delivered, dropped: attempted - delivered)
    }
}

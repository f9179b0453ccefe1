import GeoRelayCore
import GeoRelaySpool

extension TraccarForwarder {
    /// Real-time only (`buffer: false`): tries each new position once when it
    /// arrives and drops it on failure, as the Traccar client does with its
    /// buffer off. Nothing queues, so nothing is settled in the spool: the
    /// forwarder's own ledger keeps only the filter's memory. What is tried is the planner's
    /// (`RoundPlanner.realTime`).
    func runRealTime(wake: WakeSignal) async {
        var after: Int64
        do {
            after = try await reader.run { try $0.newestSeq() }
        } catch {
            logger.error("cannot read the spool: \(error)")
            return
        }
        recorder.record(.online)
        var ledger = DeliveryLedger(destination: settings.name)
        while !Task.isCancelled {
            await wake.wait()
            guard !Task.isCancelled else { break }
            let from = after
            guard let batch = try? await reader.run({ try $0.positions(after: from, limit: 10_000) }),
                let last = batch.last
            else { continue }
            after = last.seq
            let (batches, attempted) = RoundPlanner.realTime(
                batch, ledger: &ledger, filter: filter, restriction: gate?.restriction(for: settings.name))
            let results = await send(batches, mode: .realTime, ledger: &ledger)
            let delivered = results.reduce(0) { $0 + $1.delivered }
            let dropped = attempted - delivered
            // What was delivered showed the destination online as it went (`DeliveryRecorder`).
            if dropped > 0 {
                logger.warning("real-time destination dropped \(dropped) of \(attempted) positions (buffer is off)")
                recorder.record(.backoff, error: "dropped \(dropped) positions")
            }
        }
    }
}

import GeoRelayCore
import GeoRelaySpool

extension TraccarForwarder {
    /// Real-time only (`buffer: false`): tries each new position once when it
    /// arrives and drops it on failure, as the Traccar client does with its
    /// buffer off. Nothing queues, so nothing is settled in the spool: the
    /// forwarder's own ledger keeps only the filter's memory, moved on as if
    /// every position tried had been sent. Over an uplink whose budget is spent, only alarms and
    /// a still-alive position per device per `send.minIntervalSeconds` are tried.
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
            // Per device, in order, through the filter, as a round of the engine.
            var batches: [DeviceBatch] = []
            var attempted = 0
            var untracked = DeliveryUpdate(destination: settings.name)
            for stored in DeliveryLedger.byDevice(batch, \.deviceID) {
                var deliveries = ledger.plan(
                    stored, filter: filter, alreadySent: [], traccarAttributes: true, into: &untracked)
                if let restriction = gate?.restriction(for: settings.name) {
                    // A spent budget: alarms, and the newest when the still-alive minimum is due.
                    deliveries = ledger.restricted(deliveries, minIntervalMs: restriction.minIntervalMs)
                }
                // Tried once, whatever happens: the filter moves on as if they were sent.
                ledger = ledger.assuming(deliveries)
                attempted += deliveries.count
                let cursor = DeviceCursor(
                    deviceID: stored[0].deviceID, device: stored[0].position.device, ackedSeq: 0, lastSeq: 0,
                    parkedUntilMs: nil)
                if !deliveries.isEmpty { batches.append(DeviceBatch(cursor: cursor, deliveries: deliveries)) }
            }
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

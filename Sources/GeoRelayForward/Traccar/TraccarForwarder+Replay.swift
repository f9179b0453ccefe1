import GeoRelayCore
import GeoRelaySpool

extension TraccarForwarder {
    /// Sends the next chunk of the replay queue as history (`archive=true`): in
    /// fix-time order per device, without moving the live cursor. Nil when nothing is queued.
    func replayRound(ledger: inout DeliveryLedger, maxPositions: Int) async -> [DeviceResult]? {
        let name = settings.name
        guard
            let queued = try? await reader.run({ try $0.replayQueue(destination: name, limit: Self.positionsPerRound) })
        else { return nil }
        let replays = ledger.replays(queued)
        guard !replays.isEmpty else { return nil }
        let batches = DeliveryLedger.byDevice(replays).map { deliveries in
            let first = deliveries[0]
            return DeviceBatch(
                cursor: DeviceCursor(
                    deviceID: first.deviceID, device: first.device, ackedSeq: 0, lastSeq: 0, parkedUntilMs: nil),
                deliveries: deliveries)
        }
        return await send(batches, mode: .buffered, ledger: &ledger, maxPositions: maxPositions)
    }
}

import GeoRelayCore
import GeoRelaySpool

extension TraccarForwarder {
    /// Alarms go ahead of their device's backlog.
    ///
    /// Traccar computes distance and engine hours against a device's latest
    /// position, so an alarm sent ahead of older positions makes them history to
    /// the server: the ledger marks the backlog that follows `archive=true` (the
    /// key Traccar's own decoders use for positions a device stored while it
    /// could not send) and skips the alarm's own place in the backlog. The
    /// alternative, holding the alarm behind hours of backlog on a slow uplink,
    /// would defeat the point of an alarm.
    func sendAlarmsFirst(_ alarms: [Delivery], cursors: [DeviceCursor], ledger: inout DeliveryLedger, maxPositions: Int)
        async -> [DeviceResult]
    {
        let batches = DeliveryLedger.byDevice(alarms).compactMap { deliveries in
            cursors.first { $0.deviceID == deliveries[0].deviceID }.map {
                DeviceBatch(cursor: $0, deliveries: deliveries)
            }
        }
        return await send(batches, mode: .buffered, ledger: &ledger, maxPositions: maxPositions)
    }
}

import GeoRelayCore
import GeoRelaySpool

extension TraccarForwarder {
    /// A round over an uplink whose budget is spent (`UplinkGate`): the alarms not yet sent,
    /// else each device's newest position when the server's newest fix of it is at least
    /// `minIntervalMs` older, both ahead of the backlog as alarms go (the backlog skips them and
    /// later goes as history, `archive=true`). nil: nothing is due; the caller waits for a
    /// commit or a change of the gate.
    func restrictedRound(
        _ restriction: UplinkGate.Restriction, ready: [DeviceCursor], readyAlarms: [Delivery], sentAhead: Set<Int64>,
        ledger: inout DeliveryLedger, maxPositions: Int
    ) async -> [DeviceResult]? {
        var ahead = alarmAllowance.take(readyAlarms, perDeviceHour: restriction.maxAlarmsPerDeviceHour)
        if ahead.isEmpty {
            let newest: [StoredPosition]
            do {
                newest = try await reader.run { try $0.newest(of: ready) }
            } catch {
                logger.error("cannot read positions: \(error)")
                return nil
            }
            ahead = ledger.stillAlive(newest, minIntervalMs: restriction.minIntervalMs, sent: sentAhead)
        }
        guard !ahead.isEmpty else { return nil }
        return await sendAlarmsFirst(ahead, cursors: ready, ledger: &ledger, maxPositions: maxPositions)
    }
}

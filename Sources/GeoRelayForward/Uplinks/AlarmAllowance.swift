import GeoRelayCore
import Synchronization

/// How many alarms each device may still send over an uplink that carries only alarms and a
/// still-alive position (a spent budget, the `latest` policy): at most
/// `Restriction.maxAlarmsPerDeviceHour` in any hour. Alarms bypass a spent budget by design;
/// without a bound a faulty or hostile unit raising one a second would spend the plan with them.
/// Those held back stay owed in their backlog and go as history when the uplink frees.
///
/// A reference shared by a forwarder's rounds (the push forwarder plans on a copy of its ledger,
/// which would forget what it counted); counted when an alarm is handed to the transport, so a
/// retry counts again, erring on the side of the plan.
final class AlarmAllowance: Sendable {
    private let sent = Mutex<[Int64: [Int64]]>([:])
    private static let hourMs: Int64 = 3_600_000

    /// Of `alarms`, those within each device's allowance at `nowMs` (the planner's wall time);
    /// counted as sent. An alarm counted "in the future" (the wall clock set back since) still
    /// counts until an hour after its time: a step holds alarms back longer, never lets more go.
    func take(_ alarms: [Delivery], perDeviceHour: Int, nowMs: Int64) -> [Delivery] {
        sent.withLock { sent in
            alarms.filter { alarm in
                var times = (sent[alarm.deviceID] ?? []).filter { nowMs.saturatingMinus($0) < Self.hourMs }
                defer { sent[alarm.deviceID] = times.isEmpty ? nil : times }
                guard times.count < perDeviceHour else { return false }
                times.append(nowMs)
                return true
            }
        }
    }
}

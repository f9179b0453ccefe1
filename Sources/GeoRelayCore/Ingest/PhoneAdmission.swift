import Synchronization

/// Which device ids the phone port takes positions for, and which it never does.
///
/// Traccar takes positions only for devices it knows; the relay's phone port, on a boat's or a
/// marina's shared Wi-Fi, does the same: a device id is taken when the configuration lets the
/// port have it (`ingest.http.devices`, or a phone listed as a source of a `devices` entry), and
/// never when a collector feeds that id through the socket, so a host on the LAN can neither
/// post for `gps-bow` (whose real fixes would then be dropped as conflicts while its collector
/// is answered `ok`) nor grow every per-device table with made-up ids.
package final class PhoneAdmission: Sendable {
    /// Device ids the configuration lets the phone port take.
    package enum Allowed: Sendable, Equatable {
        /// `"*"`: any id (any host that reaches the port can post for any device).
        case any
        case listed(Set<String>)
    }

    package let allowed: Allowed
    /// Device ids a collector has stored under through the socket since the relay started.
    private let socketDevices = Mutex<Set<String>>([])

    package init(allowed: Allowed) {
        self.allowed = allowed
    }

    /// A collector stored a position of `device` through the socket: the phone port gives it up.
    package func socketFeeds(_ device: String) {
        socketDevices.withLock { devices in
            if !devices.contains(device) { devices.insert(device) }
        }
    }

    /// Why the phone port refuses `device`, as Traccar answers an unknown device (`err device`);
    /// nil when it takes it.
    package func refusal(of device: String) -> IngestError? {
        switch allowed {
        case .any: break
        case .listed(let ids):
            guard ids.contains(device) else {
                return .device("the phone port does not take this device id (ingest.http.devices)")
            }
        }
        if socketDevices.withLock({ $0.contains(device) }) {
            return .device("a collector feeds this device id through the socket; the phone port does not take it")
        }
        return nil
    }
}

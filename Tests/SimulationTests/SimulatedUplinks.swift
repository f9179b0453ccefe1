import GeoRelayCore
import GeoRelayForward
import GeoRelayService

/// The vessel's two uplinks as its configuration names them: the satellite underway, metered
/// with a day and a month budget; the marina's Wi-Fi moored, free. The relay's own
/// `UplinkMonitor` counts them and tells the gate (`SimulatedRelay.look`); only the route, which
/// the daemon asks the kernel for, is the simulation's.
enum SimulatedUplinks {
    /// About 6,000 positions a day: less than a passage's 6,600 fixes and an outage's backlog;
    /// the month's 15 MB is spent by mid-month at that rate (a voyage is underway 60 % of days).
    static let satellite = Configuration.Uplink(
        name: "satellite", interface: "sat0", metered: true,
        budget: Configuration.Budget(dayBytes: 1_200_000, monthBytes: 15_000_000))
    static let marina = Configuration.Uplink(name: "marina", interface: "wlan0")

    static let configuration: Configuration = {
        var configuration = Configuration()
        configuration.uplinks = [satellite, marina]
        return configuration
    }()

    static func routes(underway: Bool) -> [String: UplinkRoute.Answer] {
        let uplink = UplinkRoute.Answer.uplink(underway ? satellite : marina)
        return ["traccar": uplink, "push": uplink]
    }

    static func uplink(underway: Bool) -> String { underway ? satellite.name : marina.name }
}

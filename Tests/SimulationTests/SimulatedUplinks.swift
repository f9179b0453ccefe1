import GeoRelayCore
import GeoRelayForward
import GeoRelayService

/// The vessel's two uplinks as its configuration names them: the satellite underway, metered
/// with a day and a month budget; the marina's Wi-Fi moored, free. The relay's own
/// `UplinkMonitor` counts them and tells the gate (`SimulatedRelay.look`); only the route, which
/// the daemon asks the kernel for, is the simulation's.
struct SimulatedUplinks: Sendable {
    static let satelliteName = "satellite"
    static let marina = Configuration.Uplink(name: "marina", interface: "wlan0")

    /// About 6,000 positions a day: less than a passage's 6,600 fixes and an outage's backlog.
    /// The month's budget is spent about halfway through the voyage at that rate (a voyage is
    /// underway 60 % of days): half a megabyte for each of its days, 15 MB at most (by mid-month
    /// on a voyage of a month), so `make test`'s four days spend theirs as a month's do.
    let satellite: Configuration.Uplink

    init(days: Int) {
        satellite = Configuration.Uplink(
            name: Self.satelliteName, interface: "sat0", metered: true,
            budget: Configuration.Budget(dayBytes: 1_200_000, monthBytes: Int64(min(30, max(1, days))) * 500_000))
    }

    var configuration: Configuration {
        var configuration = Configuration()
        configuration.uplinks = [satellite, Self.marina]
        return configuration
    }

    func routes(underway: Bool) -> [String: UplinkRoute.Answer] {
        let uplink = UplinkRoute.Answer.uplink(underway ? satellite : Self.marina)
        return ["traccar": uplink, "push": uplink]
    }

    static func uplink(underway: Bool) -> String { underway ? satelliteName : marina.name }
}

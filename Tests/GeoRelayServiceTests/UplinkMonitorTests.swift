import Foundation
import GeoRelayTestTraits
import Testing
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
@testable import GeoRelayService

/// Which uplink a destination's bytes are put on: the route of the last look (of this one for
/// the first), and bytes that left by no uplink are nobody's.
@Suite(.offThePool) struct UplinkMonitorTests {
    static let starlink = Configuration.Uplink(name: "starlink", interface: "eth1")
    static let iridium = Configuration.Uplink(name: "iridium", interface: "ppp0", metered: true)

    @Test func bytesGoToTheRouteTheyWereSentOver() throws {
        let directory = try TemporaryDirectory()
        let spool = try Spool(settings: Spool.Settings(path: directory.file("spool.db")))
        defer { spool.close() }
        let monitor = UplinkMonitor(spool: spool, logger: .disabled) { Configuration() }
        let day = "2026-12-01"
        // The spool's tally starts at zero when it opens: the first look counts what was sent
        // since the start (the first probes included), on the route of that look.
        #expect(monitor.look(routes: ["traccar": .uplink(Self.starlink), "push": .uplink(Self.starlink)],
                             recorded: ["traccar": 10_000, "push": 500], day: day) == [UplinkUsage(uplink: "starlink", day: day, bytes: 10_500)])
        // Sent while both were on Starlink; by this look Traccar's route has moved to Iridium.
        let second = monitor.look(routes: ["traccar": .uplink(Self.iridium), "push": .uplink(Self.starlink)],
                                  recorded: ["traccar": 10_400, "push": 600], day: day)
        #expect(second == [UplinkUsage(uplink: "starlink", day: day, bytes: 500)])
        // Now Traccar's bytes went over Iridium; the push destination's route is gone to the LAN.
        let third = monitor.look(routes: ["traccar": .uplink(Self.iridium), "push": .otherInterface("br0")],
                                 recorded: ["traccar": 10_450, "push": 900], day: day)
        #expect(third == [UplinkUsage(uplink: "iridium", day: day, bytes: 50), UplinkUsage(uplink: "starlink", day: day, bytes: 300)])
        let fourth = monitor.look(routes: ["traccar": .unknown("no route"), "push": .otherInterface("br0")],
                                  recorded: ["traccar": 10_450, "push": 950], day: day)
        #expect(fourth.isEmpty, "bytes over an interface no uplink names are no uplink's: \(fourth)")
        #expect(monitor.routes["traccar"] == .unknown("no route"))
    }

    @Test func aDestinationWithoutARouteAtTheLastLookTakesTheRouteOfThisOne() throws {
        let directory = try TemporaryDirectory()
        let spool = try Spool(settings: Spool.Settings(path: directory.file("spool.db")))
        defer { spool.close() }
        let monitor = UplinkMonitor(spool: spool, logger: .disabled) { Configuration() }
        #expect(monitor.look(routes: [:], recorded: ["new": 7], day: "2026-12-01").isEmpty, "no route yet: nobody's")
        #expect(monitor.look(routes: ["new": .uplink(Self.iridium)], recorded: ["new": 49], day: "2026-12-01")
                == [UplinkUsage(uplink: "iridium", day: "2026-12-01", bytes: 42)])
    }

    @Test func theDayIsUTC() {
        #expect(UplinkMonitor.day(1_796_083_199_999) == "2026-11-30")
        #expect(UplinkMonitor.day(1_796_083_200_000) == "2026-12-01")
    }
}

import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

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
        #expect(
            monitor.look(
                routes: ["traccar": .uplink(Self.starlink), "push": .uplink(Self.starlink)],
                recorded: ["traccar": 10_000, "push": 500], day: day) == [
                    UplinkUsage(uplink: "starlink", day: day, bytes: 10_500)
                ])
        // Sent while both were on Starlink; by this look Traccar's route has moved to Iridium.
        let second = monitor.look(
            routes: ["traccar": .uplink(Self.iridium), "push": .uplink(Self.starlink)],
            recorded: ["traccar": 10_400, "push": 600], day: day)
        #expect(second == [UplinkUsage(uplink: "starlink", day: day, bytes: 500)])
        // Now Traccar's bytes went over Iridium; the push destination's route is gone to the LAN.
        let third = monitor.look(
            routes: ["traccar": .uplink(Self.iridium), "push": .otherInterface("br0")],
            recorded: ["traccar": 10_450, "push": 900], day: day)
        #expect(
            third == [
                UplinkUsage(uplink: "iridium", day: day, bytes: 50),
                UplinkUsage(uplink: "starlink", day: day, bytes: 300),
            ])
        let fourth = monitor.look(
            routes: ["traccar": .unknown("no route"), "push": .otherInterface("br0")],
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
        #expect(
            monitor.look(routes: ["new": .uplink(Self.iridium)], recorded: ["new": 49], day: "2026-12-01")
                == [UplinkUsage(uplink: "iridium", day: "2026-12-01", bytes: 42)])
    }

    /// `count: "interface"`: the uplink's bytes are its interface's growth between looks (DNS and
    /// the box's other traffic included), in place of what destinations recorded over it.
    @Test func anUplinkCountedByItsInterfaceTakesTheInterfacesGrowth() throws {
        let directory = try TemporaryDirectory()
        let spool = try Spool(settings: Spool.Settings(path: directory.file("spool.db")))
        defer { spool.close() }
        let monitor = UplinkMonitor(spool: spool, logger: .disabled) { Configuration() }
        let day = "2026-12-01"
        let routes: [String: UplinkRoute.Answer] = ["traccar": .uplink(Self.iridium), "push": .uplink(Self.starlink)]
        // The first look sets the interface's mark; the destinations' bytes over it are not counted.
        #expect(
            monitor.look(
                routes: routes, recorded: ["traccar": 1_000, "push": 100], day: day, interfaces: ["iridium": 50_000])
                == [UplinkUsage(uplink: "starlink", day: day, bytes: 100)])
        #expect(
            monitor.look(
                routes: routes, recorded: ["traccar": 1_500, "push": 150], day: day, interfaces: ["iridium": 50_700])
                == [
                    UplinkUsage(uplink: "iridium", day: day, bytes: 700),
                    UplinkUsage(uplink: "starlink", day: day, bytes: 50),
                ])
        // A counter that went back (the modem redialled) starts afresh.
        #expect(
            monitor.look(
                routes: routes, recorded: ["traccar": 1_500, "push": 150], day: day, interfaces: ["iridium": 10]
            ).isEmpty)
        #expect(
            UplinkMonitor.interfaceBytes([Configuration.Uplink(name: "loop", interface: "lo", count: .interface)])[
                "loop"] != nil, "lo's counters read")
        #expect(
            UplinkMonitor.interfaceBytes([
                Configuration.Uplink(name: "none", interface: "georelay-none", count: .interface)
            ]).isEmpty)
    }

    @Test func theDayIsUTC() {
        #expect(UplinkMonitor.day(1_796_083_199_999) == "2026-11-30")
        #expect(UplinkMonitor.day(1_796_083_200_000) == "2026-12-01")
    }

    @Test func totalsStartAfreshEachUTCDayAndMonth() throws {
        let directory = try TemporaryDirectory()
        let spool = try Spool(settings: Spool.Settings(path: directory.file("spool.db")))
        defer { spool.close() }
        let monitor = UplinkMonitor(spool: spool, logger: .disabled) { Configuration() }
        monitor.tally([UplinkUsage(uplink: "iridium", day: "2026-11-30", bytes: 700)], day: "2026-11-30")
        let sameDay = monitor.tally([UplinkUsage(uplink: "iridium", day: "2026-11-30", bytes: 300)], day: "2026-11-30")
        #expect(sameDay["iridium"]! == (1_000, 1_000))
        // A new month: both start afresh.
        let december = monitor.tally([UplinkUsage(uplink: "iridium", day: "2026-12-01", bytes: 50)], day: "2026-12-01")
        #expect(december["iridium"]! == (50, 50))
        // A new day of the same month: the day only.
        let next = monitor.tally([], day: "2026-12-02")
        #expect(next["iridium"]! == (0, 50))
        // The wall clock set back across midnight: the day reached goes on, not a fresh one under
        // yesterday's name (the voyage simulation spent a second budget that way).
        let back = monitor.tally([UplinkUsage(uplink: "iridium", day: "2026-12-01", bytes: 20)], day: "2026-12-01")
        #expect(back["iridium"]! == (20, 70))
        let again = monitor.tally([UplinkUsage(uplink: "iridium", day: "2026-12-02", bytes: 5)], day: "2026-12-02")
        #expect(again["iridium"]! == (25, 75), "set right again, the same day goes on")
    }

    @Test func aDestinationOnASpentBudgetIsRestrictedAndOneElsewhereIsNot() throws {
        var config = Configuration()
        var iridium = Self.iridium
        iridium.budget = Configuration.Budget(dayBytes: 100_000, monthBytes: 2_000_000)
        iridium.send = Configuration.Send(minIntervalSeconds: 1800)
        config.uplinks = [Self.starlink, iridium]
        let routes: [String: UplinkRoute.Answer] = [
            "traccar": .uplink(iridium), "push": .uplink(Self.starlink), "lan": .otherInterface("br0"),
        ]
        #expect(
            UplinkMonitor.restrictions(config, routes: routes, usage: ["iridium": (99_999, 500_000)]).isEmpty,
            "a byte left")
        let day = UplinkMonitor.restrictions(
            config, routes: routes, usage: ["iridium": (100_000, 500_000), "starlink": (9_999_999, 9_999_999)])
        #expect(Array(day.keys) == ["traccar"], "only the destination on the spent uplink")
        #expect(day["traccar"]?.uplink == "iridium")
        #expect(day["traccar"]?.minIntervalMs == 1_800_000)
        #expect(
            day["traccar"]?.reason
                == "iridium's day budget of 97.7 KiB is spent until 00:00 UTC or until another uplink carries the traffic: only alarms and a position per device every 30 min"
        )
        let month = UplinkMonitor.restrictions(config, routes: routes, usage: ["iridium": (10, 2_000_000)])
        #expect(
            month["traccar"]?.reason.hasPrefix("iridium's month budget of 1.9 MiB is spent until the 1st, 00:00 UTC")
                == true)
        // The words do not change with the bytes: a change would wake every forwarder at each look.
        #expect(UplinkMonitor.restrictions(config, routes: routes, usage: ["iridium": (150_000, 500_000)]) == day)
    }

    @Test func aLatestPolicyNarrowsItsUplinkBudgetOrNot() throws {
        var config = Configuration()
        var iridium = Self.iridium
        iridium.budget = Configuration.Budget(dayBytes: 100_000)
        iridium.send = Configuration.Send(minIntervalSeconds: 900, latestSeconds: 300)
        config.uplinks = [Self.starlink, iridium]
        let routes: [String: UplinkRoute.Answer] = ["traccar": .uplink(iridium), "push": .uplink(Self.starlink)]
        let always = UplinkMonitor.restrictions(config, routes: routes, usage: [:])
        #expect(Array(always.keys) == ["traccar"])
        #expect(always["traccar"]?.minIntervalMs == 300_000)
        #expect(
            always["traccar"]?.reason
                == "iridium carries only alarms and each device's newest position every 5 min (send.latestSeconds); the rest waits for another uplink"
        )
        // Spent: the longer of the two.
        #expect(
            UplinkMonitor.restrictions(config, routes: routes, usage: ["iridium": (100_000, 100_000)])["traccar"]?
                .minIntervalMs == 900_000)
    }

    @Test func anAllowanceIsWhatIsLeftAndSaysWhatTheLookWillSayOnceSpent() {
        var config = Configuration()
        var iridium = Self.iridium
        iridium.budget = Configuration.Budget(dayBytes: 100_000, monthBytes: 2_000_000)
        config.uplinks = [Self.starlink, iridium]
        let routes: [String: UplinkRoute.Answer] = ["traccar": .uplink(iridium), "push": .uplink(Self.starlink)]
        let allowances =
            UplinkMonitor.restrictions(config, routes: routes, usage: [:]).isEmpty
            ? UplinkMonitor.allowances(config, routes: routes, usage: ["iridium": (60_000, 1_000_000)]) : [:]
        #expect(Array(allowances.keys) == ["traccar"], "only a budgeted uplink has an allowance")
        #expect(allowances["traccar"]?.bytesLeft == 40_000)
        #expect(
            allowances["traccar"]?.whenSpent
                == UplinkMonitor.restrictions(config, routes: routes, usage: ["iridium": (100_000, 1_040_000)])[
                    "traccar"])
        // The month is closer: what is left of it, in its words.
        let month = UplinkMonitor.allowances(config, routes: routes, usage: ["iridium": (10_000, 1_990_000)])
        #expect(month["traccar"]?.bytesLeft == 10_000)
        #expect(month["traccar"]?.whenSpent.reason.contains("month budget") == true)
        #expect(
            UplinkMonitor.allowances(config, routes: routes, usage: ["iridium": (100_000, 1_000_000)]).isEmpty,
            "spent: a restriction, no allowance")
    }
}

import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// Wire bytes per uplink and UTC day: held state, summed per day and month, two months kept.
@Suite(.offThePool) struct UplinkUsageTests {
    @Test func usageIsHeldAddedUpPerDayAndMonthAndBounded() async throws {
        let fixture = SpoolFixture()
        fixture.settings.stateInterval = .seconds(60)
        let spool = try fixture.open()
        spool.record(uplinkUsage: [UplinkUsage(uplink: "iridium", day: "2026-11-30", bytes: 700)])
        spool.record(uplinkUsage: [
            UplinkUsage(uplink: "iridium", day: "2026-12-01", bytes: 100),
            UplinkUsage(uplink: "starlink", day: "2026-12-01", bytes: 5_000),
        ])
        spool.record(uplinkUsage: [UplinkUsage(uplink: "iridium", day: "2026-12-01", bytes: 23)])
        // Held like acknowledgements: a commit of positions does not carry them.
        _ = await spool.append([fix("x", 1)])
        #expect(
            try SpoolReader.open(path: fixture.settings.path).uplinkUsage(day: "2026-12-01").isEmpty,
            "the usage is still held")
        await spool.flush()
        let usage = try SpoolReader.open(path: fixture.settings.path).uplinkUsage(day: "2026-12-01")
        #expect(usage["iridium"]?.today == 123 && usage["iridium"]?.month == 123, "November is not December's")
        #expect(usage["starlink"]?.today == 5_000)
        let november = try SpoolReader.open(path: fixture.settings.path).uplinkUsage(day: "2026-11-30")
        #expect(november["iridium"]?.today == 700 && november["starlink"] == nil)

        // Seventy more days: only the newest 62 stay, and the month sums what is in it.
        var day = Date(timeIntervalSince1970: 1_796_083_200) // 2026-12-01
        for _ in 0..<70 {
            day += 86_400
            spool.record(uplinkUsage: [
                UplinkUsage(
                    uplink: "iridium",
                    day: String(Timestamp.iso8601(milliseconds: Int64(day.timeIntervalSince1970 * 1000)).prefix(10)),
                    bytes: 1)
            ])
        }
        await spool.flush()
        let kept = try spool.makeReader().uplinkUsage(day: "2027-02-09")
        #expect(kept["iridium"]?.today == 1 && kept["iridium"]?.month == 9, "February's nine days")
        let rows = try spool.withWriterConnection { db in
            let count = try db.statement("SELECT count(DISTINCT day) FROM uplink_daily")
            _ = try count.step()
            return count.int64(0)
        }
        #expect(rows == Int64(UplinkUsage.keptDays))
        spool.close()
    }

    /// A clock set back would write "yesterday" after "today": the days after it are dropped, not summed.
    @Test func aClockSetBackDropsTheDaysAheadOfIt() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        spool.record(uplinkUsage: [UplinkUsage(uplink: "cell", day: "2027-06-01", bytes: 50)])
        await spool.flush()
        spool.record(uplinkUsage: [UplinkUsage(uplink: "cell", day: "2026-12-01", bytes: 7)])
        await spool.flush()
        #expect(try spool.makeReader().uplinkUsage(day: "2027-06-01").isEmpty)
        #expect(try spool.makeReader().uplinkUsage(day: "2026-12-01")["cell"]?.today == 7)
        spool.close()
    }
}

import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// The spool's time is the clock it is handed (issue 37): retention and the day a byte is billed
/// to follow it, so a simulation can run a spool through months without waiting.
@Suite(.offThePool) struct SpoolClockTests {
    /// 2026-12-05T23:00:00Z.
    static let lateEvening: Int64 = 1_796_511_600_000

    @Test func retentionCountsOnTheSpoolsClock() async throws {
        let fixture = SpoolFixture()
        let clock = SimulatedClock(wallMs: Self.lateEvening)
        fixture.settings.clock = clock
        fixture.settings.retainHours = 24
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "d", buffered: true)])
        _ = await spool.append([fix("a", 0), fix("a", 1)])
        var update = DeliveryUpdate(destination: "d")
        update.acknowledged = [(1, 2)]
        spool.record(update)
        _ = await spool.append([])
        clock.advance(by: .seconds(23 * 3600))
        #expect(try spool.deleteExpired() == 0, "delivered 23 hours ago on the spool's clock: kept")
        clock.advance(by: .seconds(2 * 3600))
        #expect(try spool.deleteExpired() == 2, "delivered 25 hours ago on the spool's clock: gone")
    }

    @Test func bytesAreBilledToTheDayOfTheSpoolsClock() async throws {
        let fixture = SpoolFixture()
        let clock = SimulatedClock(wallMs: Self.lateEvening + 3_540_000) // 23:59
        fixture.settings.clock = clock
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "d", buffered: true)])
        var before = DeliveryUpdate(destination: "d")
        before.wireBytes = 700
        spool.record(before)
        _ = await spool.append([])
        clock.advance(by: .seconds(120)) // 00:01 the next day
        var after = DeliveryUpdate(destination: "d")
        after.wireBytes = 300
        spool.record(after)
        _ = await spool.append([])
        let status = try #require(try spool.makeReader().status().destinations.first)
        #expect(status.wireBytesToday == 300, "the new day's bytes alone")
        #expect(status.wireBytes == 1000)
    }
}

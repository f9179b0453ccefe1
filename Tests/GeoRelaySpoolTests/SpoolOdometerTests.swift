import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// Each position's odometer is fixed when it is stored, the same across restarts and late fixes.
@Suite(.offThePool) struct SpoolOdometerTests {
    /// `metres` north of 59° N, 10° E, at `second`.
    func north(_ metres: Double, _ second: Int64, device: String = "boat") -> Position {
        Position(
            device: device, timeMs: 1_784_953_800_000 + second * 1000,
            lat: 59 + metres / Geo.earthRadiusMeters * 180 / .pi, lon: 10)
    }

    func odometers(_ spool: Spool, device: String = "boat") throws -> [Double?] {
        try spool.makeReader().positions(after: 0, limit: 100_000).filter { $0.position.device == device }
            .sorted { $0.position.timeMs < $1.position.timeMs }.map(\.position.odometer)
    }

    @Test func aRestartCountsOnFromTheAnchorAsIfItHadNotHappened() async throws {
        // One spool runs through; the other is closed and opened again every 7 fixes, so the
        // anchor is read back from the stored rows each time (mid-stretch inside the radius too).
        let track = (0..<120).map { north(Double($0) * 30, Int64($0)) }
        let through = SpoolFixture()
        do {
            let spool = try through.open()
            defer { spool.close() }
            for fix in track { _ = await spool.append([fix]) }
        }
        let restarted = SpoolFixture()
        for start in stride(from: 0, to: track.count, by: 7) {
            let spool = try restarted.open()
            for fix in track[start..<min(start + 7, track.count)] { _ = await spool.append([fix]) }
            spool.close()
        }
        let a = try through.open()
        defer { a.close() }
        let b = try restarted.open()
        defer { b.close() }
        let expected = try odometers(a)
        #expect(try odometers(b) == expected)
        // 3,570 m sailed (from 1 m); the figure is at most one radius behind and in whole metres.
        let last = try #require(expected.last ?? nil)
        #expect(last <= 3571 && last > 3571 - Odometer.radiusMeters)
        #expect(expected.allSatisfy { $0 == $0?.rounded() })
    }

    @Test func aLateFixTakesItsPredecessorsFigureAndChangesNoOther() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        _ = await spool.append([north(0, 0), north(1000, 100), north(2000, 200)])
        let before = try odometers(spool)
        // From 1 m (`Odometer.start`: Traccar reads 0 as none).
        #expect(before == [1, 1001, 2001])
        // Stored after the newest, a fix from between the first two.
        _ = await spool.append([north(600, 50)])
        #expect(try odometers(spool) == [1, 601, 1001, 2001])
        // And the device's next fix counts from its newest, not from the late one.
        _ = await spool.append([north(2500, 250)])
        #expect(try odometers(spool).last == 2501)
    }

    @Test func aSourcesOwnOdometerIsStoredAsThePositionsAndNotTwice() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        var reported = north(0, 0, device: "truck")
        reported.attributes = [Attribute("odometer", .number(123_456)), Attribute("ignition", .bool(true))]
        _ = await spool.append([reported, north(500, 60, device: "truck")])
        let rows = try spool.makeReader().positions(after: 0, limit: 10)
        #expect(rows.map(\.position.odometer) == [123_456, 123_956])
        #expect(rows[0].position.attributes == [Attribute("ignition", .bool(true))])
    }
}

import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// The status page's reads: the chart's samples (held state, bounded in the transaction that
/// grows them) and a device's newest fix and thinned track.
@Suite(.offThePool) struct ChartSampleTests {
    @Test func samplesAreHeldStateAndStayWithin288PerDestinationAnd24Hours() async throws {
        let fixture = SpoolFixture()
        fixture.settings.commitWindow = .milliseconds(300)
        fixture.settings.stateInterval = .seconds(60)
        let spool = try fixture.open()
        let start: Int64 = 1_784_953_800_000
        // A removed destination's old samples go with the 24 hours.
        spool.record(chartSamples: [ChartSample(destination: "gone", timeMs: start - 1, pending: 9, wireBytes: 9)])
        await spool.flush()
        // Two days at one sample per 5 minutes, in batches as the sampler would send them.
        for step in 0..<576 {
            let t = start + Int64(step) * 300_000
            spool.record(chartSamples: [
                ChartSample(destination: "a", timeMs: t, pending: step, wireBytes: Int64(step) * 100),
                ChartSample(destination: "b", timeMs: t, pending: 0, wireBytes: 0),
            ])
        }
        // Held like acknowledgements: a commit of positions does not carry them.
        _ = await spool.append([fix("x", 1)])
        #expect(
            try SpoolReader.open(path: fixture.settings.path).chartSamples()["a"] == nil, "the samples are still held")
        await spool.flush()
        let samples = try SpoolReader.open(path: fixture.settings.path).chartSamples()
        #expect(Set(samples.keys) == ["a", "b"])
        let a = try #require(samples["a"])
        #expect(a.count == ChartSample.perDestination)
        #expect(a.last?.pending == 575 && a.first?.pending == 575 - 287, "the newest 288 are kept, oldest first")
        #expect((a.last!.timeMs - a.first!.timeMs) < ChartSample.keptMs)
        #expect(samples["b"]?.count == ChartSample.perDestination)
        spool.close()
    }

    @Test func aClockSetBackDropsTheSamplesFromItsFuture() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        spool.record(chartSamples: [ChartSample(destination: "a", timeMs: 2_000_000, pending: 1, wireBytes: 1)])
        spool.record(chartSamples: [ChartSample(destination: "a", timeMs: 1_000_000, pending: 2, wireBytes: 2)])
        await spool.flush()
        #expect(try SpoolReader.open(path: fixture.settings.path).chartSamples()["a"]?.map(\.pending) == [2])
        spool.close()
    }

    @Test func aTrackIsThinnedToItsPointsEvenlyInTimeAndEndsNearTheNewestFix() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        // Six hours at 1 Hz with a one-hour gap in the middle: 18,000 fixes.
        var positions: [Position] = []
        for second in Int64(0)..<21_600 where !(9_000..<12_600).contains(second) {
            positions.append(fix("boat", second, lat: 59 + Double(second) * 1e-5, lon: 10))
        }
        for batch in stride(from: 0, to: positions.count, by: 2000) {
            _ = await spool.append(Array(positions[batch..<min(batch + 2000, positions.count)]))
        }
        // The newest half minute alone: too few to be merged into `positions` yet.
        let newestFixes = (Int64(21_600)..<21_630).map { fix("boat", $0, lat: 59 + Double($0) * 1e-5, lon: 10) }
        _ = await spool.append(newestFixes)
        positions += newestFixes
        let reader = try SpoolReader.open(path: fixture.settings.path)
        // The newest fixes wait in `recent` (merged into `positions` at 4,096 rows): the track reads both.
        let inRecent = try reader.db.statement("SELECT count(*) FROM recent")
        _ = try inRecent.step()
        #expect(inRecent.int(0) > 0 && inRecent.int(0) < positions.count, "\(inRecent.int(0)) rows in recent")
        inRecent.reset()
        let newest = try #require(try reader.newestFix(device: "boat"))
        #expect(newest.timeMs == positions.last!.timeMs && newest.speed == 1.5)
        let track = try reader.track(
            device: "boat", sinceMs: newest.timeMs - 6 * 3_600_000, untilMs: newest.timeMs, maxPoints: 500)
        #expect(track.count <= 500 && track.count > 400, "\(track.count) points")
        #expect(track.map(\.timeMs) == track.map(\.timeMs).sorted())
        #expect(
            newest.timeMs - track.last!.timeMs < 6 * 3_600_000 / 500, "the track ends within one step of the newest fix"
        )
        #expect(
            !track.contains { (1_784_953_800_000 + 9_000_000..<1_784_953_800_000 + 12_600_000).contains($0.timeMs) })
        // A window of the unmerged fixes alone is drawn from `recent`.
        let fresh = try reader.track(
            device: "boat", sinceMs: newestFixes.first!.timeMs, untilMs: newest.timeMs, maxPoints: 10)
        #expect(
            fresh.count == 10 && fresh.first?.timeMs == newestFixes.first!.timeMs, "\(fresh.count) fixes from recent")
        #expect(try reader.newestFix(device: "nobody") == nil)
        #expect(try reader.track(device: "nobody", sinceMs: 0, untilMs: .max).isEmpty)
        spool.close()
    }
}

import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// How many batches stay on the wire, from what the answers show of the link.
@Suite(.offThePool) struct PipelineDepthTests {
    /// A link with `roundTrip` and `bytesPerSecond`: a lone request's answer, and back-to-back answers' spacing.
    static func measured(roundTrip: Double, bytesPerSecond: Double, batch: Int, ceiling: Int = 8) -> PipelineDepth {
        var depth = PipelineDepth(ceiling: ceiling)
        // A small batch alone (current positions), then a full one alone, then two back to back.
        depth.answered(bytes: 300, elapsed: .seconds(roundTrip + 300 / bytesPerSecond), spacing: nil)
        depth.answered(bytes: batch, elapsed: .seconds(roundTrip + Double(batch) / bytesPerSecond), spacing: nil)
        depth.answered(
            bytes: batch, elapsed: .seconds(roundTrip + 2 * Double(batch) / bytesPerSecond),
            spacing: .seconds(Double(batch) / bytesPerSecond))
        return depth
    }

    @Test func beforeAnyAnswerOneBatchGoesBehindAnother() {
        #expect(PipelineDepth(ceiling: 8).depth(batchBytes: 5000) == 2)
        #expect(PipelineDepth(ceiling: 1).depth(batchBytes: 5000) == 1)
    }

    /// Geostationary (600 ms, 32 KB/s), batches of 5 KB: each takes 0.16 s, so five fill a round trip.
    @Test func aLongFastPathKeepsARoundTripsWorthOnTheWire() {
        let depth = Self.measured(roundTrip: 0.6, bytesPerSecond: 32_000, batch: 5_000)
        #expect((5...6).contains(depth.depth(batchBytes: 5_000)), "\(depth.depth(batchBytes: 5_000))")
        #expect(depth.depth(batchBytes: 500) == 8, "small batches: the ceiling")
    }

    /// Narrowband (1.4 s, 1.2 KB/s), batches of 7 KB: each takes six seconds; one behind it is enough,
    /// and an alarm then waits behind one batch, not eight.
    @Test func aSlowLinkKeepsOneBatchBehindAnother() {
        let depth = Self.measured(roundTrip: 1.4, bytesPerSecond: 1_200, batch: 7_000)
        #expect(depth.depth(batchBytes: 7_000) == 2)
    }

    /// The shortest answer carries its own batch's transfer: batches of one size alone measure
    /// no rate (a first round of full frames after an outage measured 6 times the link), a larger
    /// one measures what its extra bytes took.
    @Test func batchesOfOneSizeAloneMeasureNoRate() {
        var depth = PipelineDepth(ceiling: 8)
        depth.answered(bytes: 10_000, elapsed: .seconds(0.6 + 10_000 / 32_000.0), spacing: nil)
        depth.answered(bytes: 10_000, elapsed: .seconds(0.6 + 10_000 / 32_000.0 + 0.05), spacing: nil)
        #expect(depth.secondsPerByte == nil)
        depth.answered(bytes: 30_000, elapsed: .seconds(0.6 + 30_000 / 32_000.0), spacing: nil)
        let rate = depth.secondsPerByte.map { 1 / $0 } ?? 0
        #expect(abs(rate - 32_000) < 100, "\(rate) bytes a second")
    }

    /// What a destination keeps on the wire across its connections: two batches before anything
    /// is measured (or TCP's first window, if more), then the link's bandwidth-delay product and
    /// two batches more.
    @Test func bytesOnTheWireAreTheLinksProductAndTwoBatches() {
        #expect(PipelineDepth(ceiling: 8).bytesOnTheWire(batchBytes: 10_000) == 20_000)
        #expect(PipelineDepth(ceiling: 8).bytesOnTheWire(batchBytes: 100) == PipelineDepth.initialWindow)
        let depth = Self.measured(roundTrip: 0.6, bytesPerSecond: 32_000, batch: 5_000)
        let held = depth.bytesOnTheWire(batchBytes: 10_000)
        // The round trip is the small batch's answer, its own transfer in it: a few hundred bytes more.
        #expect(abs(held - (19_200 + 20_000)) < 500, "\(held)")
    }

    @Test func aResetForgetsThePath() {
        var depth = Self.measured(roundTrip: 0.6, bytesPerSecond: 32_000, batch: 5_000)
        depth.reset()
        #expect(depth.roundTrip == nil)
        #expect(depth.depth(batchBytes: 5_000) == 2)
    }
}

import GeoRelayCore
import Testing

@testable import GeoRelayForward

/// How many batches stay on the wire, from what the answers show of the link.
@Suite struct PipelineDepthTests {
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

    @Test func aResetForgetsThePath() {
        var depth = Self.measured(roundTrip: 0.6, bytesPerSecond: 32_000, batch: 5_000)
        depth.reset()
        #expect(depth.roundTrip == nil)
        #expect(depth.depth(batchBytes: 5_000) == 2)
    }
}

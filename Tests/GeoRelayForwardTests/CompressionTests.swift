import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

@Suite(.offThePool) struct CompressionTests {
    @Test func plannerSpendsCPUOnlyWhereTheLinkIsSlower() {
        var planner = CompressionPlanner(fixedLevel: nil)
        // Unmeasured: assume a metered link.
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.thoroughLevel)
        // Loopback: 7.7 KB answered in 1 ms.
        planner.recordUpload(bytes: 7_700, seconds: 0.001)
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.fastLevel)
        // A satellite link: 7.7 KB in 0.25 s, for a while.
        for _ in 0..<40 { planner.recordUpload(bytes: 7_700, seconds: 0.25) }
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.thoroughLevel)
        // A CPU twenty times slower than the starting points: level 16 no longer fits in a
        // batch's crossing (0.35 s against 0.22 s), 15 does.
        for _ in 0..<20 {
            planner.recordCompression(
                level: CompressionPlanner.thoroughLevel, jsonBytes: 87_000, compressedBytes: 6_900, seconds: 0.348)
        }
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.middleLevel)
        // Far slower still: only the fast level fits.
        for _ in 0..<20 {
            planner.recordCompression(
                level: CompressionPlanner.middleLevel, jsonBytes: 87_000, compressedBytes: 7_000, seconds: 2)
        }
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.fastLevel)
        #expect(CompressionPlanner(fixedLevel: 3).level(forJSONBytes: 87_000) == 3)
    }

    @Test func plannerCountsTheSpoolReadAndTheLinksOwnRate() {
        var planner = CompressionPlanner(fixedLevel: nil)
        // Request-to-answer times in a pipeline hold a round trip and the wait behind other
        // batches: 7.7 KB in 0.25 s, while the link itself carries 32 KB/s.
        for _ in 0..<10 { planner.recordUpload(bytes: 7_700, seconds: 0.25) }
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.thoroughLevel)
        planner.recordLinkRate(secondsPerByte: 1.0 / 32_000)
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.thoroughLevel)
        // Reading the next batch from the spool takes 0.2 s of the 0.21 s a batch crosses in.
        for _ in 0..<20 { planner.recordPlanning(seconds: 0.2) }
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.middleLevel)
        for _ in 0..<20 { planner.recordPlanning(seconds: 0.5) }
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.fastLevel)
        // A NaN or a negative time is no measurement.
        planner.recordLinkRate(secondsPerByte: .nan)
        planner.recordCompression(
            level: CompressionPlanner.fastLevel, jsonBytes: 87_000, compressedBytes: 7_700, seconds: -.infinity)
        #expect(planner.level(forJSONBytes: 87_000) == CompressionPlanner.fastLevel)
    }

    @Test func zstdAndGzipRoundTrip() throws {
        let body = Array(String(repeating: #"{"driver":"alice","lat":59.9,"lng":10.7},"#, count: 200).utf8)
        let zstd = try ZstdCompressor().compress(body, level: 7)
        #expect(zstd.count < body.count / 10)
        #expect(try Zstd.decompress(zstd) == body)
        let gzip = try Gzip.compress(body)
        #expect(gzip.count < body.count / 10)
        #expect(gzip.prefix(2) == [0x1F, 0x8B])
        #expect(try Gzip.decompress(gzip) == body)
        #expect(throws: CompressionError.self) { try Zstd.decompress([1, 2, 3]) }
        #expect(throws: CompressionError.self) { try Gzip.decompress(Array(gzip.prefix(10))) }
    }
}

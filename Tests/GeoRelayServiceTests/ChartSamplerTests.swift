import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayService

/// The status page's samples are taken on the spool's clock (the relay's): a simulation's chart
/// gets a point per five minutes of its time, stamped with that time.
@Suite(.offThePool) struct ChartSamplerTests {
    /// 2026-07-25T04:30:00Z.
    static let start: Int64 = 1_784_953_800_000

    @Test func samplesAtOnceThenEveryIntervalOfTheSpoolsClock() async throws {
        let directory = try TemporaryDirectory()
        let clock = SimulatedClock(wallMs: Self.start)
        var settings = Spool.Settings(path: directory.file("spool.db"))
        settings.clock = clock
        let spool = try Spool(settings: settings)
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        let sampler = Task { await ChartSampler(spool: spool, logger: .disabled).run() }
        defer { sampler.cancel() }

        try await waitUntil("the first sample", spool: spool) { $0 == [Self.start] }
        try await pollUntil("the sampler asleep on the spool's clock") { clock.sleeping == 1 }
        clock.advance(by: ChartSampler.interval)
        try await waitUntil("the second sample", spool: spool) {
            $0 == [Self.start, Self.start + 300_000]
        }
    }

    /// Polls (as `pollUntil`) the times of the samples the spool has committed.
    private func waitUntil(_ what: String, spool: Spool, _ condition: ([Int64]) -> Bool) async throws {
        var times: [Int64] = []
        for _ in 0..<1000 {
            await spool.flush()
            times = try spool.makeReader().chartSamples()["traccar", default: []].map(\.timeMs)
            if condition(times) { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("gave up after 10 s waiting for \(what); sampled at \(times)")
        throw CancellationError()
    }
}

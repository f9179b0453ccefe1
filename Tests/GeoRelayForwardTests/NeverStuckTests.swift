import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// A probe is an optimisation, never a gate: whatever a server answers to the
/// relay's GET (Traccar's 400, a JSON 404/405, nginx's HTML 405, Python's HTML
/// 501, a portal's redirect), delivery resumes within one backoff ceiling of the
/// server taking positions again; and while the link is truly down only probes
/// and at most one small payload per ceiling go out.
@Suite(.offThePool) struct NeverStuckTests {
    /// The backoff ceiling these tests run with: short, so that "within one ceiling" is seconds.
    static let ceiling = 2.0

    static func timings(_ settings: inout Configuration.DestinationSettings) {
        settings.backoffMinSeconds = 0.2
        settings.backoffMaxSeconds = ceiling
        settings.probeIntervalSeconds = 0.5
        settings.requestTimeoutSeconds = 1
        settings.connectTimeoutSeconds = 0.5
    }

    /// The same for a server that always answers: timeouts long enough that a loaded machine's slow
    /// answer is not taken for a link failure (which rightly probes).
    static func answeringTimings(_ settings: inout Configuration.DestinationSettings) {
        timings(&settings)
        settings.requestTimeoutSeconds = 20
        settings.connectTimeoutSeconds = 10
    }

    /// What "within one ceiling" allows on a busy test machine: the ceiling, its jitter and the drain,
    /// and the time the test process's pool can be held by the CPU-bound suites under `make test`.
    /// The wedge this guards against never resumes at all.
    static let resumeBound: Duration = .seconds(ceiling * 1.2 + 40)

    /// Within one ceiling on the relay's own clock, its jitter and the drain's few round trips on
    /// a geostationary link: on simulated time the bound is the promise itself, not the promise
    /// plus what a loaded machine might add.
    static let simulatedResumeBound: Duration = .seconds(ceiling * 1.2 + 10)

    @Test(arguments: ServerStyle.allCases, SimulationSeed.all(2))
    func traccarResumesAfterA503WhateverItsServerAnswersAProbe(style: ServerStyle, seed: SimulationSeed)
        async throws
    {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 2) {
            Self.answeringTimings(&$0)
        }
        let run = f.replay("NeverStuckTests/traccarResumesAfterA503WhateverItsServerAnswersAProbe") + ", \(style)"
        f.traccar.setProbeStyle(style)
        f.traccar.queueStatuses([503, 503])
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 30) + track("b", count: 30))
            let resumed = try await f.world.run(for: Self.simulatedResumeBound) { f.traccar.positions.count >= 60 }
            #expect(resumed, "\(style): delivery did not resume within \(Self.simulatedResumeBound), \(run)")
        }
        // The server answered, so the link was up: payloads at the backoff time, no probes.
        #expect(f.traccar.probeCount == 0, "\(style): \(f.traccar.probeCount) probes after an HTTP answer, \(run)")
        for device in ["a", "b"] {
            #expect(
                f.traccar.positions.filter { $0.uniqueId == device }.map(\.fixTimeMs)
                    == track(device, count: 30).map(\.timeMs), "\(style) \(device), \(run)")
        }
    }

    @Test(arguments: ServerStyle.allCases)
    func pushResumesAfterA503WhateverItsServerAnswersAProbe(style: ServerStyle) async throws {
        let f = try await PushFixture { Self.answeringTimings(&$0) }
        f.server.setProbeStyle(style)
        f.server.queuePushStatuses([503])
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 60))
            #expect(
                await f.server.waitUntil(timeout: Self.resumeBound) { $0.count >= 60 },
                "\(style): delivery did not resume")
        }
        let stamps = f.server.points.map(\.timestamp)
        #expect(
            DeliveryOrder.problem(
                stamps, expected: movingTrack("a", count: 60).map { Timestamp.iso8601(milliseconds: $0.timeMs) },
                onlyNewestAhead: true) == nil, "\(style)")
        // The first batch after the 503 is a trial: at most 64 positions (the oldest, `order: auto`),
        // about a kilobyte compressed; then full batches again.
        #expect((f.server.batches.first?.points ?? .max) <= 64, "\(style): \(f.server.batches.map(\.points))")
        #expect(f.server.batches.count <= 3, "\(style): \(f.server.batches.map(\.points))")
        #expect(f.server.problems.isEmpty, "\(f.server.problems)")
    }

    /// A server whose probe answers are all it can ever give (a portal's page, an HTML error)
    /// after a link failure: the probe shows a path, so a payload goes at the backoff time.
    @Test(arguments: [ServerStyle.nginx405, .python501, .portalRedirect], SimulationSeed.all(2))
    func traccarResumesAfterALinkFailureWhenProbesOnlyShowAPath(style: ServerStyle, seed: SimulationSeed)
        async throws
    {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 1) { Self.timings(&$0) }
        let run = f.replay("NeverStuckTests/traccarResumesAfterALinkFailureWhenProbesOnlyShowAPath") + ", \(style)"
        f.traccar.setProbeStyle(style)
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 3))
            try await f.waitForStatus { $0.pending == 0 }
            f.world.network.setDown(.refuse)
            _ = await f.spool.append(track("a", count: 20, from: 3))
            try await f.waitForStatus { $0.state == "probing" }
            f.world.network.setDown(nil)
            let resumed = try await f.world.run(for: Self.simulatedResumeBound) { f.traccar.positions.count >= 23 }
            #expect(resumed, "\(style): delivery did not resume within \(Self.simulatedResumeBound), \(run)")
        }
        #expect(f.traccar.positions.map(\.fixTimeMs) == track("a", count: 23).map(\.timeMs), "\(run)")
    }

    /// Watches a black-holed link for three ceilings: probes go out, and one payload at least and
    /// at most one per ceiling, each of at most `payloadBytes`.
    static func expectProbesAndSmallPayloads(through proxy: FaultProxy, payloadBytes: Int) async throws {
        let atBackoff = proxy.counters
        let window = ceiling * 3
        try await Task.sleep(for: .seconds(window)) // the window measured, not a synchronisation
        let during = proxy.counters
        let payloads = during.payloadsWhileDown - atBackoff.payloadsWhileDown
        let probes = during.probesWhileDown - atBackoff.probesWhileDown
        let bytes = during.bytesUpWhileDown - atBackoff.bytesUpWhileDown
        #expect(probes >= 2, "probes while down: \(during.requestsWhileDown)")
        #expect(payloads >= 1, "no payload in \(window) s: a probe that never gets through must not gate delivery")
        #expect(payloads <= Int(window / ceiling) + 1, "\(payloads) payloads in \(window) s, ceiling \(ceiling) s")
        #expect(
            bytes <= probes * 400 + payloads * payloadBytes,
            "\(bytes) bytes for \(probes) probes and \(payloads) payloads")
    }

    /// Watches a link black-holed on board (a terminal that takes connections and what is written
    /// on them and answers nothing) for three ceilings of simulated time: the probes and payloads
    /// written meanwhile, and their bytes.
    static func whileBlackHoled(_ f: SimulatedForwardFixture) async throws -> (
        probes: Int, payloads: Int, bytes: Int, window: Double
    ) {
        let atBackoff = f.world.network.counters
        let window = ceiling * 3
        try await f.world.advance(by: .seconds(window))
        let during = f.world.network.counters
        return (
            during.probesWhileDown - atBackoff.probesWhileDown, during.payloadsWhileDown - atBackoff.payloadsWhileDown,
            during.bytesUpWhileDown - atBackoff.bytesUpWhileDown, window
        )
    }

    /// Black-holed for several ceilings: probes, and at most one one-position payload per ceiling.
    /// On a simulated geostationary link, from two seeds.
    @Test(arguments: SimulationSeed.all(2))
    func traccarBlackHoledSendsProbesAndOneSmallPayloadPerCeiling(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 2) { Self.timings(&$0) }
        let run = f.replay("NeverStuckTests/traccarBlackHoledSendsProbesAndOneSmallPayloadPerCeiling")
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 5) + track("b", count: 5))
            try await f.waitForStatus { $0.pending == 0 }
            f.world.network.setDown(.hold)
            _ = await f.spool.append(track("a", count: 20, from: 5) + track("b", count: 20, from: 5))
            try await f.waitForStatus { $0.state == "probing" }
            let (probes, payloads, bytes, window) = try await Self.whileBlackHoled(f)
            #expect(probes >= 2, "probes while down: \(probes), \(run)")
            #expect(payloads >= 1, "no payload in \(window) s: a probe that never gets through must not gate delivery")
            #expect(
                payloads <= Int(window / Self.ceiling) + 1,
                "\(payloads) payloads in \(window) s, ceiling \(Self.ceiling) s")
            // Probes and one-position payloads are a few hundred bytes each.
            #expect(
                bytes <= probes * 400 + payloads * 400, "\(bytes) bytes for \(probes) probes and \(payloads) payloads")
            f.world.network.setDown(nil)
            let resumed = try await f.world.run(for: Self.simulatedResumeBound) {
                Set(f.traccar.positions.map { "\($0.uniqueId) \($0.fixTimeMs)" }).count >= 50
            }
            #expect(resumed, "delivery did not resume within \(Self.simulatedResumeBound), \(run)")
        }
    }

    /// The Teltonika port black-holed: probes (identifications as `TeltonikaProbe.uniqueID`), and at
    /// most one frame of one position per ceiling (a short id goes with it, in the same write).
    /// On a simulated geostationary link, from two seeds.
    @Test(arguments: SimulationSeed.all(2))
    func teltonikaBlackHoledSendsProbesAndOneRecordPerCeiling(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, transport: .teltonika, concurrency: 1) {
            Self.timings(&$0)
        }
        let run = f.replay("NeverStuckTests/teltonikaBlackHoledSendsProbesAndOneRecordPerCeiling")
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 5))
            try await f.waitForStatus { $0.pending == 0 }
            f.world.network.setDown(.hold)
            _ = await f.spool.append(movingTrack("a", count: 500, from: 5))
            try await f.waitForStatus { $0.state == "probing" }
            let (probes, _, bytes, window) = try await Self.whileBlackHoled(f)
            let payloadBytes = bytes - probes * FaultProxy.teltonikaProbe.count
            // A one-record trial with its identification: 3 + 15 + 41 bytes; 500 positions would be 20 KB.
            let trial =
                3 + TeltonikaCodec.frameOverheadBytes
                + TeltonikaCodec.record(from: movingTrack("a", count: 1)[0]).encodedSize
            #expect(probes >= 2, "probes while down: \(probes), \(run)")
            #expect(
                payloadBytes >= trial,
                "no payload in \(window) s: a probe that never gets through must not gate delivery, \(run)")
            #expect(
                payloadBytes <= (Int(window / Self.ceiling) + 1) * trial,
                "\(payloadBytes) payload bytes in \(window) s, ceiling \(Self.ceiling) s, \(run)")
            f.world.network.setDown(nil)
            let resumed = try await f.world.run(for: Self.simulatedResumeBound) {
                Set(f.teltonika.positions.map(\.fixTimeMs)).count >= 505
            }
            #expect(resumed, "delivery did not resume within \(Self.simulatedResumeBound), \(run)")
        }
    }

    @Test func pushBlackHoledSendsProbesAndOneSmallPayloadPerCeiling() async throws {
        let f = try await PushFixture { Self.timings(&$0) }
        let proxy = try FaultProxy(targetPort: f.server.http.port)
        defer { proxy.stop() }
        let direct = f.server.http.url
        let viaProxy = "http://127.0.0.1:\(proxy.port)"
        f.settings.url = f.settings.url.replacingOccurrences(of: direct, with: viaProxy)
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 10))
            try await f.waitForStatus { $0.pending == 0 }
            proxy.setMode(.blackHole)
            _ = await f.spool.append(movingTrack("a", count: 200, from: 10))
            try await f.waitForStatus { $0.state == "probing" }
            // A one-position batch with its bearer token is well under a kilobyte; 200 positions are not.
            try await Self.expectProbesAndSmallPayloads(through: proxy, payloadBytes: 900)
            proxy.setMode(.pass)
            #expect(await f.server.waitUntil(timeout: Self.resumeBound) { Set($0.map(\.timestamp)).count >= 210 })
        }
        #expect(f.server.problems.isEmpty, "\(f.server.problems)")
    }
}

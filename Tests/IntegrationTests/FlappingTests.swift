import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

/// The uplink flaps. Both destinations sit behind fault proxies that go
/// down and up together on a seeded random schedule, cycling through every way a link breaks,
/// while 4 collectors write steadily. Everything acknowledged arrives, in order, soon after the
/// final recovery; while the link is down the relay sends probes, not payloads.
@Suite(.longOffThePool) struct FlappingTests {
    static let long = ProcessInfo.processInfo.environment["GEORELAY_LONG_TESTS"] != nil
    /// Short form: 30 s of 1–4 s periods. Long form: the issue's few minutes of 1–20 s periods.
    static let seconds: Double = long ? 240 : 30
    static let period: ClosedRange<Double> = long ? 1...20 : 1...4
    static let backoffMax = 30.0

    @Test func uplinkFlappingLosesNothingAndSendsProbesNotPayloadsWhileDown() async throws {
        let world = try RelayWorld()
        let push = try FakePushServer()
        defer { push.http.stop() }
        // 20 ms each way on top of the faults: requests are never instant on a real uplink.
        let traccarProxy = try FaultProxy(targetPort: world.server.http.port, latencyMs: 20)
        let pushProxy = try FaultProxy(targetPort: push.http.port, latencyMs: 20)
        defer {
            traccarProxy.stop()
            pushProxy.stop()
        }
        // Timeouts short enough that a black hole costs seconds; a backoff ceiling the probes must beat.
        let link =
            "timeoutSeconds: 2, connectTimeoutSeconds: 1, backoff: { minSeconds: 0.5, maxSeconds: \(Self.backoffMax) }, probe: { intervalSeconds: 1 }"
        try world.writeConfig(
            moreDestinations: pushDestination(push, via: "http://127.0.0.1:\(pushProxy.port)", link: link),
            traccarURL: "http://127.0.0.1:\(traccarProxy.port)/", link: link)
        let relay = try world.start()

        let devices = (0..<4).map { "flap\($0)" }
        // 10 positions per second per device, until the link is back for good: the last outage's
        // positions are what must drain.
        let writing = Atomic<Bool>(true)
        let written = Atomic<Int>(0)
        let acknowledged = Mutex<[String: Set<Int64>]>([:])
        let collectors = DispatchGroup()
        for device in devices {
            let client = try world.client()
            Thread {
                var i = 0
                while writing.load(ordering: .relaxed) {
                    try? client.write(line(device, i))
                    i += 1
                    usleep(100_000)
                }
                written.add(i, ordering: .relaxed)
                client.finishWriting()
            }.start()
            DispatchQueue.global().async(group: collectors) {
                // Replies come in order, one per line, until the relay closes after our half-close.
                var mine = Set<Int64>()
                var i = 0
                while let reply = client.readLine() {
                    if reply.hasPrefix("ok ") { mine.insert(fixTimeMs(i)) }
                    i += 1
                }
                acknowledged.withLock { $0[device] = mine }
            }
        }
        let schedule = await FaultProxy.flap(
            [traccarProxy, pushProxy], seed: 0x6E0_2E1A7, up: Self.period, down: Self.period,
            downModes: FaultProxy.Mode.allDown, seconds: Self.seconds)
        let recovered = WallClock.monotonicNs()
        writing.store(false, ordering: .relaxed)
        await withCheckedContinuation { continuation in collectors.notify(queue: .global()) { continuation.resume() } }
        let expected = acknowledged.withLock { $0 }
        let total = expected.values.reduce(0) { $0 + $1.count }
        let sent = written.load(ordering: .relaxed)
        #expect(total == sent, "ingest does not depend on the uplink")

        // Both at once: the relay drains them side by side, so a stall costs one bound, not two.
        async let traccarDrained = world.server.waitForAll(expected, timeout: .seconds(Self.backoffMax + 30))
        async let gatewayDrained = push.waitForAll(expected, timeout: .seconds(Self.backoffMax + 30))
        let (atTraccar, atGateway) = await (traccarDrained, gatewayDrained)
        let drainSeconds = Double(WallClock.monotonicNs() - recovered) / 1e9
        #expect(atTraccar, "acknowledged positions missing at Traccar after \(Int(Self.backoffMax + 30)) s")
        #expect(atGateway, "acknowledged positions missing at the push gateway after \(Int(Self.backoffMax + 30)) s")
        // Within one backoff period of the final recovery: the probes, not the backoff, bring it back.
        #expect(drainSeconds < Self.backoffMax, "drained \(drainSeconds) s after the link came back")
        #expect(push.problems.isEmpty, "\(push.problems)")

        // Bounded: the held state (acknowledgements, the counts) commits every 15 s.
        let status = try await world.waitForStatus(timeout: .seconds(40)) { status in
            (status["destinations"]?.array ?? []).allSatisfy { $0["pending"]?.number == 0 }
        }
        for destination in status["destinations"]?.array ?? [] {
            #expect(
                destination["quarantined"]?.number == 0, "\(destination["name"]?.string ?? "?") quarantined positions")
        }
        // What the relay says the outages cost Traccar's events is what Traccar's handlers skipped
        // of what arrived once; a copy sent again after a lost answer the relay cannot know arrived.
        let traccarStatus = status["destinations"]?.array?.first { $0["name"]?.string == "traccar" }
        let model = world.server.traccar()
        #expect(
            traccarStatus?["sentBehindNewer"]?.number == Double(model.firstArrivalsSkipped),
            "sentBehindNewer \(traccarStatus?["sentBehindNewer"]?.number ?? -1), the model \(model.firstArrivalsSkipped) (\(model.skippedByEvents) with the copies)"
        )
        let arrivals = world.server.firstArrivals
        for device in devices {
            let times = arrivals.byDevice[device] ?? []
            #expect(DeliveryOrder.problem(times) == nil, "out of order for \(device)")
        }

        // While down: payloads only for what was in flight as each outage began, never a stream of them.
        // Traccar pipelines, so per device that is what was written until the relay noticed (at worst
        // the 2 s request timeout at 10 positions/s) and the suspect's retry; per push batch, the
        // batch and curl's resend.
        let outages = schedule.filter { $0.mode.isDown }.count
        let traccar = traccarProxy.counters
        let gateway = pushProxy.counters
        #expect(
            traccar.payloadsWhileDown <= outages * devices.count * (2 * 10 + 3),
            "\(traccar.requestsWhileDown) over \(outages) outages")
        #expect(gateway.payloadsWhileDown <= outages * 2 + 2, "\(gateway.requestsWhileDown) over \(outages) outages")

        try expectNoSecrets(world, relay: relay, push: push)
        let duplicates = arrivals.duplicates
        let peak = try residentBytes(pid: relay.pid, peak: true)
        let downSeconds = schedule.filter { $0.mode.isDown }.reduce(0) { $0 + $1.seconds }
        print(
            """
            flapping: \(outages) outages (\(Int(downSeconds)) s down of \(Int(Self.seconds)) s); \(sent) sent, \(total) acknowledged, \
            delivered to both, 0 lost, \(duplicates) duplicates at Traccar, \(String(format: "%.1f", drainSeconds)) s to drain, peak RSS \(peak >> 20) MiB; \
            while down Traccar got \(traccar.bytesUpWhileDown) B (\(traccar.requestsWhileDown)), the gateway \(gateway.bytesUpWhileDown) B (\(gateway.requestsWhileDown))
            """)
    }
}

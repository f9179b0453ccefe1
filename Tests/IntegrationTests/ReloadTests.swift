import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// A reload resends nothing. 15 SIGHUPs spread over a drain of 3,200 positions
/// from 4 devices to a slow Traccar (and a push gateway): a reload lets what is in flight be
/// answered under the old generation, waits for the spool to commit what it settled, and only
/// then starts the new one, so no position arrives twice.
@Suite(.offThePool) struct ReloadTests {
    static let devices = (0..<4).map { "hup\($0)" }
    static let perDevice = 800
    static let reloads = 15

    /// - `pipeline: 32` (the default): up to 32 requests in flight per connection at each reload.
    /// - `pipeline: 1`: libcurl's one request at a time per device.
    @Test(arguments: [32, 1])
    func reloadsDuringADrainDeliverNothingTwice(pipeline: Int) async throws {
        let world = try RelayWorld()
        let push = try FakePushServer()
        defer { push.http.stop() }
        // A slow uplink: every chunk waits this long each way, so a reload always finds requests in
        // flight (before the fix, 1,823 abandoned over the 15 reloads with a window of 32). One
        // request at a time pays it per position: 4 ms already finds a request in flight for
        // nearly every device at every reload (55 of 60), where 25 ms would make the drain 40 s.
        let latencyMs = pipeline > 1 ? 25 : 4
        let traccarProxy = try FaultProxy(targetPort: world.server.http.port, latencyMs: latencyMs)
        let pushProxy = try FaultProxy(targetPort: push.http.port, latencyMs: 25)
        defer {
            traccarProxy.stop()
            pushProxy.stop()
        }
        // Small push batches, so the gateway is still draining while the reloads come.
        let gateway = pushDestination(push, via: "http://127.0.0.1:\(pushProxy.port)")
            .replacingOccurrences(
                of: "batch: { maxDelaySeconds: 0 }", with: "batch: { maxDelaySeconds: 0, maxPositions: 25 }")
        try world.writeConfig(
            destination: "pipeline: \(pipeline)", moreDestinations: gateway,
            traccarURL: "http://127.0.0.1:\(traccarProxy.port)/")
        let relay = try world.start()

        var expected: [String: Set<Int64>] = [:]
        for device in Self.devices {
            let answers = try writeInBatches(try world.client(), device: device, count: Self.perDevice)
            #expect(
                answers.allSatisfy { $0.hasPrefix("ok ") },
                "\(device): \(answers.filter { !$0.hasPrefix("ok ") }.prefix(3))")
            expected[device] = Set((0..<Self.perDevice).map(fixTimeMs))
        }
        let total = Self.devices.count * Self.perDevice

        // One SIGHUP each time another sixteenth of the backlog has arrived, each sent once the
        // previous reload is done (signals that arrive together would be taken as one).
        let started = ContinuousClock.now
        for reload in 1...Self.reloads {
            let target = total * reload / (Self.reloads + 1)
            let reached = await world.server.waitUntil(timeout: .seconds(30)) { $0.count >= target }
            try #require(reached, "reload \(reload): fewer than \(target) positions at Traccar after 30 s")
            relay.signal(SIGHUP)
            try await waitForLog(relay, "reloaded ", count: reload, timeout: .seconds(15))
        }
        async let atTraccar = world.server.waitForAll(expected, timeout: .seconds(60))
        async let atGateway = push.waitForAll(expected, timeout: .seconds(60))
        let (traccarDrained, gatewayDrained) = await (atTraccar, atGateway)
        let seconds = Double((ContinuousClock.now - started) / .milliseconds(1)) / 1000
        #expect(traccarDrained, "positions missing at Traccar")
        #expect(gatewayDrained, "positions missing at the push gateway")

        let arrivals = world.server.firstArrivals
        for device in Self.devices {
            #expect(
                DeliveryOrder.problem(arrivals.byDevice[device] ?? [], expected: (0..<Self.perDevice).map(fixTimeMs))
                    == nil,
                "\(device): first arrivals out of order or missing")
        }
        var seen = Set<String>()
        let points = push.points
        for point in points { seen.insert("\(point.trackerId) \(point.timestamp)") }
        let gatewayDuplicates = points.count - seen.count
        #expect(push.problems.isEmpty, "\(push.problems)")
        let log = relay.stderrText()
        let abandoned = log.split(separator: "\n").filter { $0.contains("abandon") }
        print(
            """
            reload (pipeline \(pipeline), \(latencyMs) ms each way): \(Self.reloads) SIGHUPs over \(total) positions from \
            \(Self.devices.count) devices in \(String(format: "%.1f", seconds)) s; \(arrivals.duplicates) duplicates at Traccar, \
            \(gatewayDuplicates) at the gateway; \(abandoned.count) abandonments logged
            """)
        #expect(arrivals.duplicates == 0, "\(arrivals.duplicates) positions arrived twice at Traccar")
        #expect(gatewayDuplicates == 0, "\(gatewayDuplicates) positions arrived twice at the push gateway")
        #expect(abandoned.isEmpty, "\(abandoned)")
        relay.signal(SIGTERM)
        #expect(relay.exitStatus == 0)
    }

    /// A server that takes requests and never answers them: the reload waits the grace period for
    /// the answers, then abandons them (logged), and only then starts the new generation, which
    /// sends them again once the server answers.
    @Test func aReloadAbandonsWhatIsStillUnansweredAfterTheGracePeriod() async throws {
        let world = try RelayWorld()
        let relay = try world.start()
        let client = try world.client()
        let answers = try writeInBatches(client, device: "a", count: 10)
        #expect(answers.allSatisfy { $0.hasPrefix("ok ") })
        #expect(await world.server.waitUntil(timeout: .seconds(10)) { $0.count >= 10 })
        world.server.setBehaviour(.hang)
        let requestsBefore = world.server.requestCount
        _ = try writeInBatches(client, device: "a", from: 10, count: 5)
        // A request that never gets an answer leaves no trace but the count: poll it, bounded.
        let deadline = ContinuousClock.now + .seconds(10)
        while world.server.requestCount == requestsBefore, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        try #require(world.server.requestCount > requestsBefore, "no request reached the hanging server within 10 s")

        let signalled = ContinuousClock.now
        relay.signal(SIGHUP)
        try await waitForLog(relay, "reloaded ", count: 1, timeout: .seconds(15))
        let reloadSeconds = Double((ContinuousClock.now - signalled) / .milliseconds(1)) / 1000
        // The grace period (5 s) is waited out in full, and the abandoned forwarder is gone soon after.
        #expect(reloadSeconds >= 5 && reloadSeconds < 8, "reloaded \(reloadSeconds) s after the SIGHUP")
        let log = relay.stderrText()
        let graceOver = try #require(log.range(of: "still finishing"), "the grace period's end is not logged")
        let abandoned = try #require(log.range(of: "abandoned "), "the requests abandoned are not logged")
        let reloaded = try #require(log.range(of: "reloaded "))
        // The old forwarder had returned before the new generation started.
        #expect(graceOver.lowerBound < abandoned.lowerBound && abandoned.lowerBound < reloaded.lowerBound)

        world.server.setBehaviour(.normal)
        #expect(await world.server.waitForAll(["a": Set((0..<15).map(fixTimeMs))], timeout: .seconds(30)))
        #expect(world.server.firstArrivals.byDevice["a"] == (0..<15).map(fixTimeMs))
        relay.signal(SIGTERM)
        #expect(relay.exitStatus == 0)
    }

    /// Polls the relay's standard error (a child process's file: there is no event to await)
    /// until `text` appears `count` times; throws, quoting the log's end, after `timeout`.
    private func waitForLog(_ relay: RelayProcess, _ text: String, count: Int, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while relay.stderrText().components(separatedBy: text).count - 1 < count {
            guard ContinuousClock.now < deadline else {
                throw RelayProcessError(
                    message:
                        "\"\(text)\" not logged \(count) times within \(timeout): \(relay.stderrText().suffix(2000))")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

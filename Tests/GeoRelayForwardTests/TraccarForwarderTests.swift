import CCurl
import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// A spool and a forwarder to a fake Traccar server, in one process.
final class ForwardFixture: SpoolFixture, @unchecked Sendable {
    let server: FakeOsmAndServer

    init(
        buffer: Bool = true, concurrency: Int = 4, pipeline: Int = Configuration.DestinationSettings().pipeline,
        stateInterval: Duration = .seconds(15),
        configure: (inout Configuration.DestinationSettings) -> Void = { _ in }
    ) async throws {
        server = try FakeOsmAndServer()
        var settings = Configuration.DestinationSettings()
        settings.url = server.url
        settings.buffer = buffer
        settings.concurrency = concurrency
        settings.pipeline = pipeline
        try await super.init(settings: settings, stateInterval: stateInterval, configure: configure)
    }

    /// Runs the forwarder while `body` runs, then stops it.
    func withForwarder(gate: UplinkGate? = nil, _ body: () async throws -> Void) async throws {
        try await running(try TraccarForwarder(settings: settings, spool: spool, logger: log.logger, gate: gate), body)
    }

    deinit {
        server.http.stop()
    }
}

extension Configuration.DestinationSettings {
    /// Backoff and timeouts short enough for tests, and every position sent: these tests are
    /// about delivery, not thinning.
    mutating func useTestTimings() {
        backoffMinSeconds = 0.2
        backoffMaxSeconds = 0.5
        probeIntervalSeconds = 1
        requestTimeoutSeconds = 5
        connectTimeoutSeconds = 2
        filter.mode = .all
    }
}

/// Runs a forwarder while `body` runs, then stops it and waits for it.
func running(_ forwarder: any DestinationForwarder, _ body: () async throws -> Void) async throws {
    let task = Task { await forwarder.run() }
    defer { task.cancel() }
    try await body()
    task.cancel()
    await task.value
}

/// Waits for the spool's view of a destination to satisfy `condition`.
/// Acknowledgements are committed asynchronously and no event marks that, so this polls, bounded.
func destinationStatus(
    _ spool: Spool, _ name: String, timeout: Duration, _ condition: (SpoolStatus.Destination) -> Bool
) async throws -> SpoolStatus.Destination {
    let deadline = ContinuousClock.now + timeout
    var nextFlush = ContinuousClock.now + statusFlushPeriod
    while true {
        let status = try spool.makeReader().status().destinations.first { $0.name == name }!
        if condition(status) || ContinuousClock.now >= deadline { return status }
        if ContinuousClock.now >= nextFlush {
            await spool.flush()
            nextFlush = ContinuousClock.now + statusFlushPeriod
        } else {
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}

/// How often a wait on the spool's status writes the spool's held state. Forwarder tests run
/// with the relay's state interval (15 s), so the forwarder decides from its ledger, not from
/// committed state; what status shows lags by up to that interval, as it does for the crew.
/// A wait commits what is held once a second (as a drain's progress is committed) instead of
/// waiting out the interval: between those commits the forwarder still runs ahead of the spool.
let statusFlushPeriod: Duration = .seconds(1)

func track(_ device: String, count: Int, from start: Int = 0) -> [Position] {
    (start..<(start + count)).map { i in
        Position(
            device: device, timeMs: 1_784_953_800_000 + Int64(i) * 1000, lat: 59 + Double(i) * 1e-4, lon: 10.5,
            speed: 2.5, course: Double(i % 360))
    }
}

@Suite(.offThePool) struct TraccarForwarderTests {
    /// Both engines: one request at a time (libcurl) and pipelined.
    @Test(arguments: [1, 32])
    func deliversEveryPositionInPerDeviceOrderOverKeptAliveConnections(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 4, pipeline: pipeline)
        try await f.withForwarder {
            for device in ["a", "b", "c", "d", "e", "f"] {
                _ = await f.spool.append(track(device, count: 100))
            }
            #expect(
                await f.server.waitUntil { $0.count >= 600 }, "\(f.server.positions.count) arrived\n\(f.log.tail())")
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.pending == 0, "\(f.log.tail())")
            #expect(status.sent == 600)
            #expect(status.wireBytes > 600 * 50)
        }
        let stored = f.server.positions
        #expect(stored.count == 600)
        for device in ["a", "b", "c", "d", "e", "f"] {
            #expect(f.server.deliveryProblem(device, expected: track(device, count: 100).map(\.timeMs)) == nil)
        }
        // Keep-alive: one connection per worker, not one per position; pipelined, several requests at once on one.
        #expect(f.server.http.connectionsAccepted <= 4)
        #expect(
            pipeline == 1 ? f.server.http.deepestPipeline == 1 : f.server.http.deepestPipeline > 1,
            "\(f.server.http.deepestPipeline)")
        let first = try #require(stored.first { $0.uniqueId == "a" && $0.fixTimeMs == track("a", count: 1)[0].timeMs })
        #expect(abs(first.speedKnots - 2.5 / OsmAndQuery.metresPerSecondPerKnot) < 0.001)
        #expect(first.lat == 59)
    }

    /// More devices with a backlog than fit in one round: every device is served in turn, so the
    /// last device's positions start arriving before the first device's backlog is done. Each
    /// device holds a little more than two shares of a round's read (8,192 among 64 devices): the
    /// last device starts in the second round, the first device ends in the third, whatever order
    /// a round's requests are answered in (with one share and a bit, both fell in the second
    /// round, and which came first was the machine's to decide).
    @Test func devicesBeyondOneRoundAreServedInTurn() async throws {
        let f = try await ForwardFixture(concurrency: 4)
        let devices = (0..<(TraccarForwarder.devicesPerRound + 1)).map { String(format: "d%03d", $0) }
        let perDevice = 2 * TraccarForwarder.positionsPerRound / TraccarForwarder.devicesPerRound + 32
        for device in devices { _ = await f.spool.append(track(device, count: perDevice)) }
        try await f.withForwarder {
            // Waited for while they arrive, whatever else keeps the machine busy.
            #expect(await f.server.waitWhileArriving { $0.count >= devices.count * perDevice })
        }
        let stored = f.server.positions
        let lastDeviceFirst = try #require(stored.firstIndex { $0.uniqueId == devices.last })
        let firstDeviceDone = try #require(stored.lastIndex { $0.uniqueId == devices.first })
        #expect(
            lastDeviceFirst < firstDeviceDone,
            "the last device waited for the first device's whole backlog (\(lastDeviceFirst), \(firstDeviceDone))")
        for device in devices {
            #expect(f.server.deliveryProblem(device, expected: track(device, count: perDevice).map(\.timeMs)) == nil)
        }
    }

    /// A fleet back from an outage: every unit's current position reaches the server before any
    /// unit's history, and the history follows oldest first, marked as such.
    @Test(arguments: [1, 32])
    func aFleetsCurrentPositionsAllArriveBeforeAnyHistory(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 4, pipeline: pipeline) { $0.order = .currentFirst }
        let devices = (0..<40).map { String(format: "unit%02d", $0) }
        for device in devices { _ = await f.spool.append(track(device, count: 60)) }
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= devices.count * 60 })
        }
        let first = f.server.positions.prefix(devices.count)
        #expect(Set(first.map(\.uniqueId)) == Set(devices), "one position of every unit first")
        #expect(
            first.allSatisfy {
                $0.fixTimeMs == track($0.uniqueId, count: 60).last?.timeMs && $0.attributes["archive"] == nil
            })
        for device in devices {
            #expect(f.server.deliveryProblem(device, expected: track(device, count: 60).map(\.timeMs)) == nil)
        }
        // The price, as Traccar's handlers pay it: every unit's 59 history positions raise no event.
        #expect(f.server.traccar().skippedByEvents == devices.count * 59)
    }

    @Test func rotationWrapsRoundTheDevices() {
        let cursors = (1...100).map {
            DeviceCursor(deviceID: Int64($0), device: "d\($0)", ackedSeq: 0, lastSeq: 1, parkedUntilMs: nil)
        }
        #expect(
            RoundPlanner.inTurn(cursors, after: 0, count: TraccarForwarder.devicesPerRound).map(\.deviceID)
                == Array(1...64))
        #expect(
            RoundPlanner.inTurn(cursors, after: 64, count: TraccarForwarder.devicesPerRound).map(\.deviceID) == Array(
                65...100) + Array(1...28))
        #expect(
            RoundPlanner.inTurn(cursors, after: 100, count: TraccarForwarder.devicesPerRound).map(\.deviceID)
                == Array(1...64))
    }

    /// Both engines: one request at a time (libcurl) and pipelined.
    @Test(arguments: [1, 32])
    func unknownDeviceIsParkedWhileOthersFlow(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 2, pipeline: pipeline)
        f.server.setUnknownDevices(["ghost"])
        try await f.withForwarder {
            _ = await f.spool.append(track("ghost", count: 20) + track("real", count: 20) + track("other", count: 20))
            #expect(await f.server.waitUntil { $0.count >= 40 })
            let status = try await f.waitForStatus { $0.parked == 20 }
            #expect(status.parked == 20)
            #expect(status.parkedDevices == ["ghost"])
        }
        #expect(Set(f.server.positions.map(\.uniqueId)) == ["real", "other"])
    }

    /// The park holds from the answer, whatever the state interval. With the default
    /// 15 s the spool shows it only at the next commit; read from the spool alone, every round
    /// until then sent the device's window again (5,656 requests in 15 s). Here the other devices
    /// keep the forwarder busy for several rounds inside one state interval.
    @Test(arguments: [1, 32])
    func anUnknownDeviceDrawsAHandfulOfRequestsPerParkAtTheDefaultStateInterval(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 2, pipeline: pipeline)
        f.server.setUnknownDevices(["ghost"])
        try await f.withForwarder {
            _ = await f.spool.append(track("ghost", count: 20) + track("real", count: 20))
            #expect(await f.server.waitUntil { $0.count >= 20 }, "the known device's backlog")
            for round in 1...5 {
                _ = await f.spool.append(track("real", count: 20, from: 20 * round))
                #expect(await f.server.waitUntil { $0.count >= 20 * (round + 1) }, "round \(round) of the known device")
            }
        }
        #expect(f.server.unknownDeviceRequests >= 1)
        #expect(
            f.server.unknownDeviceRequests <= 3,
            "\(f.server.unknownDeviceRequests) requests for a device the server does not know")
        #expect(Set(f.server.positions.map(\.uniqueId)) == ["real"])
    }

    /// A position whose query is longer than the 4,096-byte request line Traccar reads
    /// goes as a form POST (pipelined) or in the body (one at a time), its long attributes cut
    /// only if even the 64 KiB body cannot hold it; the device is never parked for it.
    @Test(arguments: [1, 32])
    func aPositionTooLongForARequestLineStillReachesTheServer(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 1, pipeline: pipeline)
        var long = track("long", count: 3)
        long[0].attributes = [Attribute("note", .string(String(repeating: "x", count: 5000)))]
        long[1].attributes = [
            Attribute("note", .string(String(repeating: "y", count: 70_000))), Attribute("short", .number(1)),
        ]
        try await f.withForwarder {
            _ = await f.spool.append(long)
            #expect(await f.server.waitUntil { $0.count >= 3 }, "every position delivered")
        }
        #expect(f.server.overlongRequestLines == 0)
        let stored = f.server.positions
        #expect(stored.count == 3)
        #expect(
            stored.first?.attributes["note"] == .string(String(repeating: "x", count: 5000)),
            "kept whole in a form body")
        #expect(
            stored.dropFirst().first.map { $0.attributes["note"] == nil && $0.attributes["short"] == .number(1) }
                == true, "the long attribute left out, the rest kept")
    }

    @Test func aParkDeadlineBeyondOneParkPeriodIsAClockJumpAndIsIgnored() async throws {
        let f = try await ForwardFixture(concurrency: 1)
        _ = await f.spool.append(track("early", count: 5) + track("later", count: 5))
        // Parked under a clock 10 hours ahead of now; "later" within one park period of now.
        var update = DeliveryUpdate(destination: f.settings.name)
        update.parked = [(1, WallClock.nowMs() + 36_000_000, "HTTP 400"), (2, WallClock.nowMs() + 300_000, "HTTP 400")]
        f.spool.record(update)
        await f.spool.flush()
        #expect(try f.spool.makeReader().status().destinations.first?.parkedDevices.sorted() == ["early", "later"])
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= 5 })
            let status = try await f.waitForStatus { $0.parked == 5 }
            #expect(status.parkedDevices == ["later"])
        }
        #expect(Set(f.server.positions.map(\.uniqueId)) == ["early"])
    }

    /// Both engines: one request at a time (libcurl) and pipelined.
    @Test(arguments: [1, 32])
    func payloadRefusedByClosingIsQuarantinedAndTheRestFlows(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 1, pipeline: pipeline)
        // Traccar closes the connection without answering when a value does not parse (here a cell tower).
        var bad = track("a", count: 1, from: 5)[0]
        bad.attributes = [Attribute("cell", .string("not-a-cell"))]
        _ = await f.spool.append(track("a", count: 5) + [bad] + track("a", count: 5, from: 6))
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= 10 })
            let status = try await f.waitForStatus { $0.pending == 0 && $0.quarantined == 1 }
            #expect(status.quarantined == 1)
            #expect(status.pending == 0)
        }
        #expect(
            f.server.positions.map(\.fixTimeMs) == (track("a", count: 5) + track("a", count: 5, from: 6)).map(\.timeMs))
    }

    /// Both engines: one request at a time (libcurl) and pipelined.
    @Test(arguments: [1, 32])
    func outageIsCaughtUpWithoutInterventionAndProbesInsteadOfResending(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 2, pipeline: pipeline)
        let port = f.server.http.port
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 10))
            #expect(await f.server.waitUntil { $0.count >= 10 })
            // Acknowledged too before the server goes: a position stored but not yet answered
            // when the connection closes is rightly sent again, and this test counts copies.
            #expect(try await f.waitForStatus { $0.pending == 0 }.pending == 0, "the first ten acknowledged")
            f.server.http.stop()
            _ = await f.spool.append(track("a", count: 10, from: 10) + track("b", count: 10))
            // Wait until the forwarder has noticed and is backing off.
            var sawBackoff = false
            for _ in 0..<100 where !sawBackoff {
                let state = try f.spool.makeReader().status().destinations[0].state
                sawBackoff = state == "backoff" || state == "probing"
                if !sawBackoff { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(sawBackoff)
            let requestsDuringOutage = f.server.requestCount
            try await Task.sleep(for: .seconds(2)) // several backoff periods with the server down
            #expect(f.server.requestCount == requestsDuringOutage) // nothing reached a server that is not there
            try f.server.http.start(port: port)
            #expect(await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 30 })
            #expect(try await f.waitForStatus { $0.pending == 0 }.pending == 0)
        }
        let a = f.server.positions.filter { $0.uniqueId == "a" }.map(\.fixTimeMs)
        #expect(a == track("a", count: 20).map(\.timeMs))
    }

    /// 401/403 come from an authenticating proxy in front of Traccar (OsmAnd itself has no auth):
    /// the positions are kept and retried with backoff until the proxy lets them through.
    @Test(arguments: [503, 500, 502, 429, 401, 403], [1, 32])
    func serverErrorsBackOffAndRetry(status: Int, pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 1, pipeline: pipeline)
        f.server.setBehaviour(.status(status, headers: status == 429 ? [("Retry-After", "1")] : []))
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 3))
            let state = try await f.waitForStatus { $0.lastError != nil }
            #expect(f.server.positions.isEmpty)
            #expect(state.lastError?.contains("HTTP \(status)") == true)
            f.server.setBehaviour(.normal)
            #expect(await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 3 })
        }
    }

    /// Both engines: one request at a time (libcurl) and pipelined.
    @Test(arguments: [1, 32])
    func aServerThatAcceptsAndNeverAnswersTimesOutAndNothingIsQuarantined(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 1, pipeline: pipeline) { $0.requestTimeoutSeconds = 1 }
        f.server.setBehaviour(.hang)
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 3))
            let state = try await f.waitForStatus { $0.lastError != nil }
            #expect(state.lastError?.lowercased().contains("timed out") == true, "\(state.lastError ?? "")")
            #expect(state.pending == 3 && state.quarantined == 0)
            f.server.setBehaviour(.normal)
            #expect(await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 3 })
            let after = try await f.waitForStatus { $0.pending == 0 }
            #expect(after.quarantined == 0)
        }
    }

    /// Both engines: one request at a time (libcurl) and pipelined.
    @Test(arguments: [1, 32])
    func captivePortalPageIsNotADelivery(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 1, pipeline: pipeline)
        f.server.setBehaviour(.htmlPage)
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 2))
            let state = try await f.waitForStatus { $0.lastError != nil }
            #expect(state.lastError?.contains("HTML") == true)
            #expect(state.pending == 2)
            #expect(state.sent == 0)
            f.server.setBehaviour(.normal)
            #expect(await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 2 })
        }
    }

    @Test func realTimeOnlyDestinationDropsWhatFails() async throws {
        let f = try await ForwardFixture(buffer: false, concurrency: 1)
        try await f.withForwarder {
            // The forwarder starts where the spool ends; it records its state once it has read that.
            #expect(try await f.waitForStatus { $0.updatedMs != nil }.updatedMs != nil)
            f.server.setBehaviour(.status(503, headers: []))
            _ = await f.spool.append(track("a", count: 2))
            var tries = 0
            while f.server.requestCount < 2, tries < 200 {
                try await Task.sleep(for: .milliseconds(20))
                tries += 1
            }
            f.server.setBehaviour(.normal)
            _ = await f.spool.append(track("a", count: 1, from: 2))
            #expect(await f.server.waitUntil { $0.count >= 1 })
        }
        // The failed two were tried once each and dropped; only the third arrived.
        #expect(f.server.positions.map(\.fixTimeMs) == [track("a", count: 1, from: 2)[0].timeMs])
        #expect(f.server.requestCount == 3)
    }
}

@Suite(.offThePool) struct BackoffTests {
    struct Fixed: RandomNumberGenerator {
        var value: UInt64
        mutating func next() -> UInt64 { value }
    }

    @Test func growsExponentiallyWithinBoundsAndResets() {
        var backoff = Backoff(minSeconds: 5, maxSeconds: 300)
        var middle = Fixed(value: UInt64.max / 2)
        let delays = (0..<10).map { _ in backoff.nextDelay(using: &middle) }
        #expect(abs(delays[0] - 5) < 0.01)
        #expect(abs(delays[1] - 10) < 0.01)
        #expect(abs(delays[3] - 40) < 0.01)
        #expect(delays.allSatisfy { $0 >= 5 && $0 <= 300 })
        #expect(delays.last == 300)
        backoff.reset()
        #expect(abs(backoff.nextDelay(using: &middle) - 5) < 0.01)
    }

    @Test func jitterStaysWithinTwentyPercent() {
        var backoff = Backoff(minSeconds: 5, maxSeconds: 300)
        var random = SeededRandom(seed: 47)
        _ = backoff.nextDelay(using: &random)
        _ = backoff.nextDelay(using: &random)
        for _ in 0..<100 {
            var copy = backoff
            let d = copy.nextDelay(using: &random)
            #expect(d >= 16 && d <= 24)
        }
    }
}

@Suite(.offThePool) struct TraccarProtocolTests {
    let traccar = TraccarProtocol(settings: Configuration.DestinationSettings())

    func response(_ status: Int, _ headers: [(String, String)] = [], body: String = "") -> Result<
        HTTPResponse, CurlError
    > {
        .success(HTTPResponse(status: status, headers: headers, body: Array(body.utf8), wireBytes: 0))
    }

    @Test func mapsAnswersToOutcomes() {
        #expect(traccar.outcome(of: response(200)) == .delivered)
        #expect(traccar.outcome(of: response(200, body: "engineStop")) == .delivered)
        if case .unknownDevice = traccar.outcome(of: response(400)) {} else { Issue.record("400") }
        if case .unknownDevice = traccar.outcome(of: response(404)) {} else { Issue.record("404") }
        if case .rejected = traccar.outcome(of: response(413)) {} else { Issue.record("413") }
        #expect(
            traccar.outcome(of: response(429, [("Retry-After", "7")]))
                == .unavailable("HTTP 429", retryAfter: 7, transport: false))
        if case .unavailable(_, nil, false) = traccar.outcome(of: response(502)) {} else { Issue.record("502") }
        if case .unavailable(_, nil, true) = traccar.outcome(
            of: response(200, [("Content-Type", "text/html")], body: "<html>"))
        {
        } else {
            Issue.record("html")
        }
        if case .rejected = traccar.outcome(
            of: .failure(CurlError(CURLE_GOT_NOTHING, message: "Empty reply from server")))
        {
        } else {
            Issue.record("52")
        }
        if case .unavailable(_, nil, true) = traccar.outcome(
            of: .failure(CurlError(CURLE_COULDNT_CONNECT, message: "Couldn't connect")))
        {
        } else {
            Issue.record("7")
        }
    }

    @Test func formPostWithParametersInTheBodyOnly() {
        let request = traccar.request(for: Position(device: "a", timeMs: 1_784_953_800_000, lat: 1, lon: 2))
        #expect(request.method == "POST")
        #expect(request.url == "http://127.0.0.1:5055")
        #expect(!request.url.contains("?"))
        #expect(request.headers.contains { $0 == ("Content-Type", "application/x-www-form-urlencoded") })
        #expect(String(decoding: request.body, as: UTF8.self) == "id=a&timestamp=1784953800&lat=1&lon=2")
    }
}

@Suite(.offThePool) struct ForwarderFilterTests {
    /// Metres north of 59.9 N as latitude.
    func north(_ metres: Double) -> Double { 59.9 + metres / 111_195 }

    func moored(_ device: String, seconds: Range<Int>, jitter: Double = 30) -> [Position] {
        seconds.map { i in
            Position(
                device: device, timeMs: 1_784_953_800_000 + Int64(i) * 1000, lat: north(jitter * sin(Double(i) / 7)),
                lon: 10.7)
        }
    }

    @Test func defaultFilterSendsOneStopForAJitteryMooringAndMotionFlags() async throws {
        let f = try await ForwardFixture { $0.filter = FilterSettings() }
        var track = moored("a", seconds: 0..<1200)
        // Then under way north at 5 m/s for two minutes.
        track += (0..<120).map { i in
            Position(
                device: "a", timeMs: 1_784_953_800_000 + Int64(1200 + i) * 1000, lat: north(60 + Double(i) * 5),
                lon: 10.7)
        }
        _ = await f.spool.append(track)
        try await f.withForwarder {
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.pending == 0)
        }
        let sent = f.server.positions
        // Oldest first (`order: auto`: the backlog reaches the server well within 10 s): the first
        // fix, the stop (after 60 s inside the radius), leaving it, then every 75 m, and Traccar's
        // event handlers see every one.
        #expect(sent.first?.fixTimeMs == track[0].timeMs)
        #expect(f.server.orderProblem("a") == nil)
        #expect(f.server.traccar().skippedByEvents == 0)
        #expect(sent.filter { $0.attributes["motion"] == .bool(false) }.count == 1)
        #expect(sent.filter { $0.attributes["motion"] == .bool(true) }.count == 1)
        #expect(sent.count < 15, "\(sent.count) sent of \(track.count)")
        let status = try f.spool.makeReader().status()
        #expect(status.destinations[0].sent == sent.count)
    }

    @Test func aRestartInTheMiddleOfAStopNeitherFloodsNorForgets() async throws {
        let f = try await ForwardFixture { $0.filter = FilterSettings() }
        _ = await f.spool.append(moored("a", seconds: 0..<300))
        try await f.withForwarder {
            _ = try await f.waitForStatus { $0.pending == 0 }
        }
        let before = f.server.positions.count
        #expect(f.server.positions.last?.attributes["motion"] == .bool(false))
        // A new forwarder (as after a restart) sees more of the same mooring.
        _ = await f.spool.append(moored("a", seconds: 300..<900))
        try await f.withForwarder {
            _ = try await f.waitForStatus { $0.pending == 0 }
        }
        #expect(f.server.positions.count == before)
    }

    /// Both engines: one request at a time (libcurl) and pipelined.
    @Test(arguments: [1, 32])
    func anAlarmGoesAheadOfItsDevicesBacklogWhichFollowsAsHistory(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 1, pipeline: pipeline)
        var backlog = track("a", count: 300)
        backlog[299].alarm = "sos"
        _ = await f.spool.append(backlog + track("b", count: 5))
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= 305 })
            _ = try await f.waitForStatus { $0.pending == 0 }
        }
        let a = f.server.positions.filter { $0.uniqueId == "a" }
        #expect(a.first?.attributes["alarm"] == .string("sos"))
        #expect(a.count == 300) // the alarm once, not again in its turn
        #expect(a.dropFirst().allSatisfy { $0.attributes["archive"] == .bool(true) })
        #expect(Array(a.dropFirst().map(\.fixTimeMs)) == backlog.prefix(299).map(\.timeMs))
    }

    /// One request at a time and pipelined, on the simulated geostationary link (from two seeds):
    /// the link paces the drain, so the alarm comes mid-round whatever the machine's load.
    @Test(arguments: [1, 32], SimulationSeed.all(2))
    func anAlarmArrivingMidRoundCutsTheRoundShort(pipeline: Int, seed: SimulationSeed) async throws {
        // Current first: the alarm always goes ahead (history first, a backlog that reaches the
        // server within the alarm's second lets it go in its turn: `RoundPlannerTests`).
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 1, pipeline: pipeline) {
            $0.order = .currentFirst
        }
        let run = "TraccarForwarderTests/anAlarmArrivingMidRoundCutsTheRoundShort"
        // One request a round trip takes 600 ms a position; a pipelined window, about 130 a second.
        let backlog = track("a", count: pipeline == 1 ? 200 : 1_000)
        _ = await f.spool.append(backlog)
        try await f.withForwarder {
            let underWay = try await f.waitForArrivals { $0.count >= 20 }
            #expect(underWay, "the backlog under way, \(f.replay(run))")
            var alarm = track("a", count: 1, from: backlog.count)[0]
            alarm.alarm = "sos"
            _ = await f.spool.append([alarm])
            let all = try await f.waitForArrivals { $0.count >= backlog.count + 1 }
            #expect(all, "the backlog and the alarm, \(f.replay(run))")
        }
        let received = f.traccar.positions
        let at = try #require(received.firstIndex { $0.attributes["alarm"] == .string("sos") })
        // Sent long before the backlog drained, not after it.
        #expect(
            at < backlog.count / 2, "the alarm arrived as position \(at) of \(received.count), \(f.replay(run))")
        #expect(received.filter { $0.attributes["alarm"] != nil }.count == 1)
        #expect(received[(at + 1)...].allSatisfy { $0.attributes["archive"] == .bool(true) })
    }
}

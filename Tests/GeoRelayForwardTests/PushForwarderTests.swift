import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Synchronization
import Testing

@testable import GeoRelayForward

/// A clock the test moves by hand.
final class TestClock: Sendable {
    private let ms = Atomic<Int64>(WallClock.nowMs())
    func now() -> Int64 { ms.load(ordering: .relaxed) }
    func advance(seconds: Double) { ms.add(Int64(seconds * 1000), ordering: .relaxed) }
}

/// A spool and a push forwarder to the fake gateway, in one process.
final class PushFixture: SpoolFixture, @unchecked Sendable {
    let server: FakePushServer
    let clock = TestClock()

    init(
        mode: PushSettings.AuthMode = .login, readsAhead: Duration? = nil,
        configure: (inout Configuration.DestinationSettings) -> Void = { _ in }
    ) async throws {
        server = try FakePushServer(readsAhead: readsAhead)
        var settings = server.destination()
        settings.push?.authMode = mode
        settings.push?.batchMaxDelaySeconds = 0
        settings.push?.zstdLevel = 3
        try await super.init(settings: settings, configure: configure)
    }

    func withForwarder(gate: UplinkGate? = nil, _ body: () async throws -> Void) async throws {
        let clock = self.clock
        try await running(
            try PushForwarder(settings: settings, spool: spool, logger: log.logger, gate: gate, now: { clock.now() }),
            body)
    }

    deinit {
        server.http.stop()
    }
}

func movingTrack(_ device: String, count: Int, from start: Int = 0, alarmAt: Int? = nil) -> [Position] {
    (start..<(start + count)).map { (i: Int) -> Position in
        let step = Double(i)
        let timeMs: Int64 = 1_784_953_800_000 + Int64(i) * 1000
        let lat: Double = 59.9 + step * 4.5e-5
        let lon: Double = 10.7 + step * 2e-5
        let speed: Double = 5 + Double(i % 7) * 0.1
        let course: Double = 45 + Double(i % 5)
        let altitude: Double = 12 + Double(i % 3)
        return Position(
            device: device, timeMs: timeMs, lat: lat, lon: lon, speed: speed, course: course, altitude: altitude,
            accuracy: 4, battery: 80, alarm: i == alarmAt ? "sos" : nil)
    }
}

@Suite(.offThePool) struct PushForwarderTests {
    @Test func loginModeDeliversEveryFieldInOrderWithOneTokenAndOneLogin() async throws {
        let f = try await PushFixture()
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("bow", count: 40, alarmAt: 3) + movingTrack("stern", count: 40))
            #expect(await f.server.waitUntil { $0.count >= 80 })
        }
        #expect(f.server.problems.isEmpty)
        #expect(f.server.tokensIssued == 1)
        #expect(f.server.logins == 1)
        let bow = f.server.points.filter { $0.trackerId == "bow@alice" }
        // The alarm (the fourth fix) goes ahead of its backlog; the rest follow oldest first
        // (`order: auto`), once.
        var expected = movingTrack("bow", count: 40, alarmAt: 3).map { Timestamp.iso8601(milliseconds: $0.timeMs) }
        expected.insert(expected.remove(at: 3), at: 0)
        #expect(bow.map(\.timestamp) == expected)
        let fourth = try #require(bow.first, "no position reached the gateway for bow")
        #expect(fourth.fields["speed"] == .number(5.3))
        #expect(fourth.fields["heading"] == .number(48))
        #expect(fourth.fields["altitude"] == .number(12))
        #expect(fourth.fields["accuracy"] == .number(4))
        #expect(fourth.fields["battery"] == .number(80))
        #expect(fourth.fields["alarm"] == .string("sos"))
        #expect(bow[1].fields["alarm"] == nil)
        #expect(f.server.batches.allSatisfy { $0.encoding == "zstd" })
        // The token was stored for restarts, readable by its owner only.
        let store = TokenStore(spoolPath: f.spool.path, destination: "push")
        let mode = (try FileManager.default.attributesOfItem(atPath: store.path)[.posixPermissions] as? NSNumber)?
            .intValue
        #expect(mode == 0o600)
        #expect(store.load()?.loggedIn == true)
    }

    @Test func snakeCaseTokenAnswersWork() async throws {
        let f = try await PushFixture()
        f.server.useSnakeCase(true)
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 5))
            #expect(await f.server.waitUntil { $0.count >= 5 })
        }
        #expect(f.server.problems.isEmpty)
    }

    @Test func a401GetsAFreshTokenAndTheBatchIsRetried() async throws {
        let f = try await PushFixture()
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 5))
            #expect(await f.server.waitUntil { $0.count >= 5 })
            f.server.expireAllTokens()
            _ = await f.spool.append(movingTrack("a", count: 5, from: 5))
            #expect(await f.server.waitUntil { $0.count >= 10 })
        }
        #expect(f.server.tokensIssued == 2)
        #expect(f.server.logins == 2)
        #expect(f.server.points.count == 10)
    }

    @Test func theTokenIsRefreshedAfter24HoursByTheClock() async throws {
        let f = try await PushFixture()
        f.server.setExpiresIn(nil)
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 2))
            #expect(await f.server.waitUntil { $0.count >= 2 })
            f.clock.advance(seconds: 23 * 3600)
            _ = await f.spool.append(movingTrack("a", count: 2, from: 2))
            #expect(await f.server.waitUntil { $0.count >= 4 })
            #expect(f.server.tokensIssued == 1)
            f.clock.advance(seconds: 3600 + 1)
            _ = await f.spool.append(movingTrack("a", count: 2, from: 4))
            #expect(await f.server.waitUntil { $0.count >= 6 })
        }
        #expect(f.server.tokensIssued == 2)
    }

    @Test func expiresInShortensTheRefresh() async throws {
        let f = try await PushFixture()
        f.server.setExpiresIn(600)
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 1))
            #expect(await f.server.waitUntil { $0.count >= 1 })
            f.clock.advance(seconds: 600)
            _ = await f.spool.append(movingTrack("a", count: 1, from: 1))
            #expect(await f.server.waitUntil { $0.count >= 2 })
        }
        #expect(f.server.tokensIssued == 2)
    }

    @Test func unsupportedEncodingsFallBackFromZstdToGzipToNone() async throws {
        let f = try await PushFixture()
        f.server.setEncodings(["gzip", "identity"])
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 10))
            #expect(await f.server.waitUntil { $0.count >= 10 })
            let gzip = try await f.waitForStatus { $0.encoding == "gzip" }
            #expect(gzip.encoding == "gzip")
            f.server.setEncodings(["identity"])
            _ = await f.spool.append(movingTrack("a", count: 10, from: 10))
            #expect(await f.server.waitUntil { $0.count >= 20 })
            let none = try await f.waitForStatus { $0.encoding == "none" }
            #expect(none.encoding == "none")
        }
        #expect(Set(f.server.batches.map(\.encoding)) == ["gzip", "identity"])
        #expect(f.server.points.count == 20)
    }

    @Test func oneRefusedPositionIsQuarantinedAndEveryOtherDelivered() async throws {
        let f = try await PushFixture()
        let track = movingTrack("a", count: 100)
        f.server.refuse(trackerId: "a@alice", timestamp: Timestamp.iso8601(milliseconds: track[37].timeMs))
        try await f.withForwarder {
            _ = await f.spool.append(track)
            #expect(await f.server.waitUntil { $0.count >= 99 })
            let status = try await f.waitForStatus { $0.quarantined == 1 && $0.pending == 0 }
            #expect(status.quarantined == 1)
            #expect(status.pending == 0)
        }
        var expected = track.map { Timestamp.iso8601(milliseconds: $0.timeMs) }
        expected.remove(at: 37)
        #expect(
            DeliveryOrder.problem(f.server.points.map(\.timestamp), expected: expected, onlyNewestAhead: true) == nil)
        #expect(f.server.points.first?.timestamp == expected.first, "history first (order: auto)")
    }

    @Test func a413HalvesTheBatchesAndABacklogGoesOutInFullOnes() async throws {
        let f = try await PushFixture()
        f.server.setMaxPoints(150)
        _ = await f.spool.append(movingTrack("a", count: 1000))
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= 1000 })
        }
        #expect(f.server.points.count == 1000)
        let sizes = f.server.batches.map(\.points)
        #expect(sizes.allSatisfy { $0 <= 150 })
        // The history first (`order: auto`, the backlog well within 10 s): 500 → 250 → 125 after
        // the 413s, then full batches of 125.
        #expect(sizes == Array(repeating: 125, count: 8))
    }

    /// A fleet back from an outage: the first batch is every unit's current position.
    @Test func aFleetsCurrentPositionsGoAsTheFirstBatch() async throws {
        let f = try await PushFixture { $0.order = .currentFirst }
        let devices = (0..<40).map { String(format: "unit%02d", $0) }
        _ = await f.spool.append(devices.flatMap { movingTrack($0, count: 60) })
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= devices.count * 60 })
        }
        let first = f.server.points.prefix(devices.count)
        #expect(f.server.batches.first?.points == devices.count)
        #expect(Set(first.map(\.trackerId)) == Set(devices.map { "\($0)@alice" }))
        #expect(
            first.allSatisfy {
                $0.timestamp == Timestamp.iso8601(milliseconds: movingTrack("unit00", count: 60).last!.timeMs)
            })
        for device in devices {
            let stamps = f.server.points.filter { $0.trackerId == "\(device)@alice" }.map(\.timestamp)
            #expect(
                DeliveryOrder.problem(
                    stamps, expected: movingTrack(device, count: 60).map { Timestamp.iso8601(milliseconds: $0.timeMs) },
                    onlyNewestAhead: true) == nil)
        }
    }

    /// A backlog's batches go several at a time on one connection, and the gateway still takes each
    /// device's history oldest first, each position once.
    @Test func aBacklogsBatchesArePipelinedInOrder() async throws {
        let f = try await PushFixture(readsAhead: .milliseconds(500))
        let devices = (0..<4).map { "unit\($0)" }
        _ = await f.spool.append(devices.flatMap { movingTrack($0, count: 1_500) })
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= devices.count * 1_500 }, "the backlog delivered")
        }
        #expect(f.server.http.deepestPipeline >= 2, "batches on the wire at once: \(f.server.http.deepestPipeline)")
        #expect(f.server.points.count == devices.count * 1_500, "each position once")
        for device in devices {
            let stamps = f.server.points.filter { $0.trackerId == "\(device)@alice" }.map(\.timestamp)
            #expect(
                DeliveryOrder.problem(
                    stamps,
                    expected: movingTrack(device, count: 1_500).map { Timestamp.iso8601(milliseconds: $0.timeMs) },
                    onlyNewestAhead: true) == nil)
        }
    }

    /// The token refused in the middle of a window: every batch on the wire gets a 401, the first
    /// of them a new token, and the others go again with it, without a login each.
    @Test func aTokenRefusedInAWindowIsRenewedOnce() async throws {
        let f = try await PushFixture(readsAhead: .milliseconds(200))
        let track = movingTrack("a", count: 6_000)
        _ = await f.spool.append(track)
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= 501 }, "the window under way")
            f.server.expireAllTokens()
            #expect(
                await f.server.waitForAll(["a": Set(track.map(\.timeMs))], timeout: .seconds(30)),
                "every position delivered")
        }
        #expect(
            f.server.tokensIssued == 2,
            "tokens issued: \(f.server.tokensIssued) (one at the start, one after the 401; not one per batch on the wire)"
        )
    }

    /// A 503 for one batch of a window while those behind it are taken: nothing is lost, the
    /// refused batch goes again after the backoff, and the batches the gateway took behind it are
    /// settled, not sent again (the satellite link would carry them twice, the gateway get
    /// duplicates).
    @Test func aBatchRefusedInTheMiddleOfAWindowLosesNothingAndSendsNothingTwice() async throws {
        let f = try await PushFixture(readsAhead: .milliseconds(200))
        let track = movingTrack("a", count: 3_000)
        // The current position, the first batch of history, then a 503 for the second.
        f.server.queuePushStatuses([nil, nil, 503])
        _ = await f.spool.append(track)
        try await f.withForwarder {
            #expect(
                await f.server.waitForAll(["a": Set(track.map(\.timeMs))], timeout: .seconds(30)),
                "every position delivered")
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.pending == 0)
        }
        #expect(f.server.problems.isEmpty)
        #expect(
            f.log.messages.contains { $0.contains("took behind a batch not delivered are settled") },
            "no batch was taken behind the refused one, so the test shows nothing:\n\(f.log.tail())")
        let points = f.server.points
        #expect(
            points.count == track.count,
            "the gateway got \(points.count) positions for \(track.count): \(points.count - Set(points.map(\.timestamp)).count) twice"
        )
    }

    /// The backlog's last batch, not full but due, goes in the window behind the full one before it
    /// (a server that reads ahead shows both on the wire): the end of a drain costs no round trip
    /// of its own.
    @Test func theBacklogsLastBatchGoesInTheWindow() async throws {
        let f = try await PushFixture(readsAhead: .milliseconds(500))
        _ = await f.spool.append(movingTrack("a", count: 1_150))
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= 1_150 }, "the backlog delivered")
        }
        #expect(f.server.batches.map(\.points) == [500, 500, 150])
        // The first goes alone (nothing shows keep-alive yet); the second and the last together.
        #expect(f.server.http.deepestPipeline >= 2, "batches on the wire at once: \(f.server.http.deepestPipeline)")
    }

    @Test func backlogBatchesAreFull() async throws {
        let f = try await PushFixture()
        _ = await f.spool.append(movingTrack("a", count: 600) + movingTrack("b", count: 600))
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= 1200 })
        }
        // Their history first, in full batches (`order: auto`, the backlog well within 10 s).
        #expect(f.server.batches.map(\.points) == [500, 500, 200])
    }

    /// Positions received before the wall clock was set back 3 h look, to the batcher, as if
    /// they arrived 3 h from now: a batch that is not full must not wait for the clock to catch up.
    @Test func aBatchReceivedBeforeTheClockWentBackIsNotHeldBack() async throws {
        // A minute's delay and half of it to arrive: held for the clock it would wait hours, held for
        // the delay a minute; sent at once it arrives well within the bound, however busy the machine.
        let f = try await PushFixture { $0.push?.batchMaxDelaySeconds = 60 }
        _ = await f.spool.append(movingTrack("a", count: 3), receivedMs: WallClock.nowMs() + 3 * 3_600_000)
        try await f.withForwarder {
            #expect(
                await f.server.waitUntil(timeout: .seconds(30)) { $0.count >= 3 },
                "a 3-position batch waited for the clock")
        }
    }

    @Test func offlineAtStartThenRecovery() async throws {
        let f = try await PushFixture()
        let port = f.server.http.port
        f.server.http.stop()
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 20))
            let status = try await f.waitForStatus { $0.lastError != nil }
            #expect(status.lastError?.contains("auth server unavailable") == true)
            #expect(status.pending == 20)
            try f.server.http.start(port: port)
            #expect(await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 20 })
        }
        #expect(f.server.problems.isEmpty)
    }

    @Test func serverErrorsBackOffAndDropsAreRetried() async throws {
        let f = try await PushFixture()
        f.server.queuePushStatuses([503, 500, 0, 429])
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 30))
            #expect(await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 30 })
        }
        #expect(f.server.points.count == 30)
    }

    @Test func tokenModeUsesTheCallersTokenAndWaitsForANewOneAfterA401() async throws {
        let tokenFile = try TemporaryDirectory()
        let path = tokenFile.file("token")
        let f = try await PushFixture(mode: .token) { settings in
            settings.push?.token = Secret(.file(tokenFile.file("token")), path: "auth.token")
            settings.push?.authBaseURL = nil
            settings.push?.apiKey = nil
        }
        try f.server.issueToken().write(toFile: path, atomically: true, encoding: .utf8)
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 5))
            #expect(await f.server.waitUntil { $0.count >= 5 })
            f.server.expireAllTokens()
            _ = await f.spool.append(movingTrack("a", count: 5, from: 5))
            let failed = try await f.waitForStatus { $0.state == "auth-failed" }
            #expect(failed.state == "auth-failed")
            #expect(failed.pending == 5)
            // Another program renews the token file.
            try f.server.issueToken().write(toFile: path, atomically: true, encoding: .utf8)
            #expect(await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 10 })
        }
        #expect(f.server.tokensIssued == 2) // both issued by the "app", none by the relay
        #expect(f.server.logins == 0)
    }
}

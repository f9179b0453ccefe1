import CCurl
import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

@testable import GeoRelayForward

/// A spool and a Traccar forwarder on the Teltonika protocol, to the fake Teltonika port, in one process.
final class TeltonikaFixture: SpoolFixture, @unchecked Sendable {
    let server: FakeTeltonikaServer

    init(
        buffer: Bool = true, concurrency: Int = 4, stateInterval: Duration = .seconds(15), readsAhead: Duration? = nil,
        configure: (inout Configuration.DestinationSettings) -> Void = { _ in }
    ) async throws {
        server = try FakeTeltonikaServer(readsAhead: readsAhead)
        var settings = Configuration.DestinationSettings()
        settings.traccarProtocol = .teltonika
        settings.url = "tcp://127.0.0.1:\(server.port)"
        settings.buffer = buffer
        settings.concurrency = concurrency
        try await super.init(settings: settings, stateInterval: stateInterval, configure: configure)
    }

    func withForwarder(_ body: () async throws -> Void) async throws {
        try await running(try TraccarForwarder(settings: settings, spool: spool, logger: log.logger), body)
    }

    /// Per device, the fix times stored, in the order they arrived.
    var storedByDevice: [String: [Int64]] {
        Dictionary(grouping: server.positions, by: \.uniqueId).mapValues { $0.map(\.fixTimeMs) }
    }

    deinit {
        server.stop()
    }
}

/// Traccar's Teltonika port as a destination (`protocol: "teltonika"`), against a fake that
/// frames and decodes as Traccar does.
@Suite(.offThePool) struct TeltonikaEngineTests {
    /// IMEIs as real devices identify, and ids shorter than 10 characters, whose identification
    /// Traccar answers only once the first frame has arrived with it.
    static let devices = ["356307042441013", "356307042441014", "a", "b2", "vessel-7", "356307042441015"]

    @Test func everyDevicesBacklogArrivesInOrderInFramesOnOneConnectionPerDevice() async throws {
        let f = try await TeltonikaFixture(concurrency: 4) { $0.order = .currentFirst }
        for device in Self.devices { _ = await f.spool.append(movingTrack(device, count: 600)) }
        let total = Self.devices.count * 600
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= total }, "every position stored")
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.pending == 0 && status.sent == total && status.quarantined == 0)
            #expect(status.state == "online" && status.lastSuccessMs != nil)
        }
        let stored = f.storedByDevice
        for device in Self.devices {
            #expect(
                DeliveryOrder.problem(
                    stored[device] ?? [], expected: movingTrack(device, count: 600).map(\.timeMs), onlyNewestAhead: true
                ) == nil,
                "\(device)")
            // Behind by 600 fixes: the newest first, then the history oldest first.
            #expect(
                stored[device]?.first == movingTrack(device, count: 600).last?.timeMs,
                "\(device): the current position first")
        }
        let statistics = f.server.statistics
        // One connection per device, identified once, every identification answered 0x01.
        #expect(statistics.connections == Self.devices.count)
        #expect(
            statistics.identifications.count == Self.devices.count && statistics.identifications.allSatisfy(\.known))
        #expect(Set(f.server.positions.map { "\($0.uniqueId) \($0.connection)" }).count == Self.devices.count)
        // Frames of up to 255 positions: the newest in a frame of its own, then the 599 others in three.
        #expect(statistics.framesAnswered == 4 * Self.devices.count, "\(statistics.framesAnswered) frames")
        let bytesPerPosition = Double(statistics.bytesReceived) / Double(total)
        // 41 bytes for the fix, 6 for its odometer (IO 16, 4 bytes and its id).
        #expect(bytesPerPosition <= 51, "\(bytesPerPosition) bytes per position on the wire")
        // The payload both ways is the frames, the ids and their answers; the bill adds every
        // segment's headers (the handshakes and ACKs of one connection per device).
        let reader = try f.spool.makeReader()
        let status = try reader.status()
        let payload = Int64(statistics.bytesReceived + Self.devices.count + 4 * statistics.framesAnswered)
        #expect(status.counters["forward.payloadBytes.\(f.settings.name)"] == payload)
        #expect(
            status.destinations[0].wireBytes > payload + Int64(Self.devices.count) * 3 * 52,
            "billed \(status.destinations[0].wireBytes) for \(payload) payload bytes")
        #expect(
            status.destinations[0].wireBytes < payload * 2,
            "billed \(status.destinations[0].wireBytes) for \(payload) payload bytes")
        let sent = movingTrack("a", count: 1)[0]
        let first = try #require(f.server.positions.first { $0.uniqueId == "a" && $0.fixTimeMs == sent.timeMs })
        #expect(
            first.lat == sent.lat && first.lon == sent.lon && first.valid
                && first.satellites == Int(TeltonikaCodec.defaultSatellites))
        #expect(first.attributes["io113"] == .number(80), "battery level as io113 for a device with no model")
    }

    /// A fleet back from an outage: every unit's current position in a frame before any history.
    @Test func aFleetsCurrentPositionsAllArriveBeforeAnyHistory() async throws {
        let f = try await TeltonikaFixture(concurrency: 4) { $0.order = .currentFirst }
        let devices = (0..<40).map { String(format: "35630704244%04d", $0) }
        for device in devices { _ = await f.spool.append(movingTrack(device, count: 60)) }
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= devices.count * 60 })
        }
        let first = f.server.positions.prefix(devices.count)
        #expect(Set(first.map(\.uniqueId)) == Set(devices), "one position of every unit first")
        #expect(first.allSatisfy { $0.fixTimeMs == movingTrack($0.uniqueId, count: 60).last?.timeMs })
        for device in devices {
            #expect(
                DeliveryOrder.problem(
                    f.storedByDevice[device] ?? [], expected: movingTrack(device, count: 60).map(\.timeMs),
                    onlyNewestAhead: true) == nil)
        }
        // The price, as Traccar's handlers pay it: every unit's 59 history positions raise no event.
        #expect(f.server.traccar().skippedByEvents == devices.count * 59)
    }

    /// A connection is kept between rounds: positions arriving later go on it without identifying again.
    @Test func laterPositionsGoOnTheKeptConnection() async throws {
        let f = try await TeltonikaFixture(concurrency: 1)
        try await f.withForwarder {
            for round in 0..<3 {
                _ = await f.spool.append(
                    movingTrack("356307042441013", count: 10, from: round * 10)
                        + movingTrack("s", count: 10, from: round * 10))
                #expect(await f.server.waitUntil { $0.count >= (round + 1) * 20 }, "round \(round) stored")
            }
        }
        #expect(f.storedByDevice["356307042441013"] == movingTrack("356307042441013", count: 30).map(\.timeMs))
        #expect(f.storedByDevice["s"] == movingTrack("s", count: 30).map(\.timeMs))
        #expect(f.server.statistics.connections == 2)
        #expect(f.server.statistics.identifications.count == 2)
    }

    /// The park holds from the refused identification, with the default 15 s state
    /// interval too, while the known device keeps the forwarder busy for several rounds.
    @Test func anUnknownDeviceDrawsAHandfulOfIdentificationsPerParkAtTheDefaultStateInterval() async throws {
        let f = try await TeltonikaFixture(concurrency: 2)
        f.server.setUnknownDevices(["ghost"])
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("ghost", count: 20) + movingTrack("real", count: 20))
            #expect(await f.server.waitUntil { $0.count >= 20 }, "the known device's backlog")
            for round in 1...5 {
                _ = await f.spool.append(movingTrack("real", count: 20, from: 20 * round))
                #expect(await f.server.waitUntil { $0.count >= 20 * (round + 1) }, "round \(round) of the known device")
            }
        }
        let refused = f.server.statistics.identifications.filter { !$0.known }.count
        #expect(refused >= 1)
        #expect(refused <= 3, "\(refused) identifications of a device the server does not know")
        #expect(Set(f.server.positions.map(\.uniqueId)) == ["real"])
    }

    @Test func unknownDevicesAreParkedWhileOthersFlow() async throws {
        let f = try await TeltonikaFixture(concurrency: 2)
        // A long id (answered alone) and a short one (answered with its first frame, which Traccar drops).
        f.server.setUnknownDevices(["999999999999999", "ghost"])
        try await f.withForwarder {
            _ = await f.spool.append(
                movingTrack("999999999999999", count: 20) + movingTrack("ghost", count: 20)
                    + movingTrack("356307042441013", count: 20) + movingTrack("real", count: 20))
            #expect(await f.server.waitUntil { $0.count >= 40 })
            let status = try await f.waitForStatus { $0.parked == 40 }
            #expect(status.parked == 40)
            #expect(status.parkedDevices.sorted() == ["999999999999999", "ghost"])
            #expect(status.quarantined == 0)
        }
        #expect(Set(f.server.positions.map(\.uniqueId)) == ["356307042441013", "real"])
        #expect(f.server.statistics.framesAnswered == 2)
    }

    /// A device the server has taken positions of identifies with its first frame on a new
    /// connection (its long id no longer waits for its answer alone): one round trip less after
    /// every outage. Deleted on the server meanwhile, that frame is dropped unanswered, the device
    /// parked, and nothing lost: it arrives once the server knows the device again.
    @Test func aKnownDeviceIdentifiesWithItsFrameAndADeletedOneLosesNothing() async throws {
        let f = try await TeltonikaFixture(concurrency: 1) { $0.parkSeconds = 1 }
        let device = "356307042441013"
        let track = movingTrack(device, count: 30)
        try await f.withForwarder {
            _ = await f.spool.append(Array(track[0..<10]))
            #expect(await f.server.waitUntil { $0.count >= 10 }, "the first ten, on the first connection")
            // Settled before the server goes: an answer lost with it would send them again.
            try await f.waitForStatus { $0.pending == 0 }
            let port = f.server.port
            f.server.stop()
            try f.server.start(port: port)
            _ = await f.spool.append(Array(track[10..<20]))
            #expect(await f.server.waitUntil { $0.count >= 20 }, "the next ten, on a new connection")
            try await f.waitForStatus { $0.pending == 0 }
            f.server.stop()
            f.server.setUnknownDevices([device])
            try f.server.start(port: port)
            _ = await f.spool.append(Array(track[20..<30]))
            try await f.waitForStatus { $0.parked == 10 }
            f.server.setUnknownDevices([])
            #expect(await f.server.waitUntil { $0.count >= 30 }, "the last ten once the device is known again")
        }
        let identifications = f.server.statistics.identifications.filter { $0.uniqueId == device }
        #expect(identifications.count >= 3, "\(identifications)")
        #expect(f.storedByDevice[device] == track.map(\.timeMs), "each position once, in order")
        #expect(
            identifications.prefix(2).map(\.withFrame) == [false, true],
            "the first connection's id went alone (the device not yet taken); the second's with its frame")
        #expect(identifications.dropFirst(2).first?.known == false, "the deleted device's id, answered 0x00")
    }

    @Test func aParkedDeviceTheServerNowKnowsIsUnparked() async throws {
        let f = try await TeltonikaFixture(concurrency: 1) { $0.parkSeconds = 1 }
        f.server.setUnknownDevices(["356307042441013"])
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("356307042441013", count: 5))
            try await f.waitForStatus { $0.parked == 5 }
            f.server.setUnknownDevices([])
            #expect(await f.server.waitUntil { $0.count >= 5 }, "delivered once the park ran out")
            let status = try await f.waitForStatus { $0.pending == 0 && $0.parked == 0 }
            #expect(status.parkedDevices.isEmpty)
        }
    }

    /// Traccar closes the connection without answering a frame it cannot decode. The frame is
    /// sent once more, then halved until the one position that still closes it stands alone; a
    /// probe answered by the server proves it is that position, which is quarantined. Everything
    /// else arrives, in order.
    /// The server reads ahead, so frames are on the wire behind the one it closes on: they go
    /// again after it.
    @Test(arguments: [1, 37, 254, 255, 256, 600])
    func anUndecodablePositionIsQuarantinedAloneAndTheRestArrives(bad: Int) async throws {
        let f = try await TeltonikaFixture(concurrency: 2, readsAhead: .milliseconds(50)) { $0.order = .currentFirst }
        let track = movingTrack("356307042441013", count: 600)
        f.server.setUndecodable(fixTimes: [track[bad - 1].timeMs])
        try await f.withForwarder {
            _ = await f.spool.append(track + movingTrack("other", count: 300, from: 1000))
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.pending == 0 && status.quarantined == 1)
            #expect(status.state == "online")
        }
        var expected = track.map(\.timeMs)
        expected.remove(at: bad - 1)
        let stored = f.storedByDevice
        #expect(
            DeliveryOrder.problem(stored["356307042441013"] ?? [], expected: expected, onlyNewestAhead: true) == nil,
            "all but position \(bad), in order, once")
        #expect(
            DeliveryOrder.problem(
                stored["other"] ?? [], expected: movingTrack("other", count: 300, from: 1000).map(\.timeMs)) == nil,
            "the other device unaffected")
        // The probe identified once, before the quarantine.
        #expect(f.server.statistics.identifications.filter { $0.uniqueId == TeltonikaProbe.uniqueID }.count == 1)
        #expect(f.server.statistics.deepestPipeline > 1, "frames went behind frames")
    }

    /// A lone device's backlog goes in frames back to back, ahead of their answers: one round trip
    /// for the backlog, not one a frame. The server reads before it answers, so a client that
    /// waits for each answer shows it whatever the timing; `pipeline: 1` does.
    @Test(arguments: [1, 128])
    func aBacklogsFramesGoBackToBack(pipeline: Int) async throws {
        let f = try await TeltonikaFixture(readsAhead: .milliseconds(200)) {
            $0.pipeline = pipeline
            $0.order = .currentFirst
        }
        let device = "356307042441013"
        let track = movingTrack(device, count: 2000)
        _ = await f.spool.append(track)
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= track.count }, "every position stored\n\(f.log.tail())")
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.pending == 0 && status.sent == track.count && status.quarantined == 0)
        }
        #expect(
            DeliveryOrder.problem(
                f.storedByDevice[device] ?? [], expected: track.map(\.timeMs), onlyNewestAhead: true) == nil,
            "every position once, the newest first, then the history in order")
        let statistics = f.server.statistics
        // The newest alone, then 1,999 in eight frames: every frame answered, none twice.
        #expect(statistics.framesAnswered == 9, "\(statistics.framesAnswered) frames")
        #expect(
            pipeline == 1 ? statistics.deepestPipeline == 1 : statistics.deepestPipeline > 1,
            "\(statistics.deepestPipeline) frames on the connection at once")
    }

    /// A server that closes every data frame's connection unanswered but answers identifications
    /// (it cannot decode anything the relay sends) quarantines what it closes on, position by position:
    /// it is the server's doing, and the probe proves the server is there.
    @Test func aServerThatClosesOnEveryFrameQuarantinesPositionByPosition() async throws {
        let f = try await TeltonikaFixture(concurrency: 1)
        f.server.setBehaviour(.closeWithoutAnswer)
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("356307042441013", count: 4))
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.quarantined == 4)
        }
        #expect(f.server.positions.isEmpty)
    }

    /// A server that never answers a frame: the request timeout breaks the connection, nothing of
    /// the frame settles, nothing is quarantined, and it all arrives once the server answers.
    @Test func aServerThatNeverAnswersTimesOutAndNothingIsQuarantined() async throws {
        let f = try await TeltonikaFixture(concurrency: 1) { $0.requestTimeoutSeconds = 1 }
        f.server.setBehaviour(.hang)
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("356307042441013", count: 3))
            let down = try await f.waitForStatus { $0.lastError != nil }
            #expect(down.lastError?.contains("timed out") == true, "\(down.lastError ?? "")")
            #expect(down.pending == 3 && down.quarantined == 0)
            f.server.setBehaviour(.normal)
            #expect(
                await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 3 }, "delivered once the server answers")
            let after = try await f.waitForStatus { $0.pending == 0 }
            #expect(after.quarantined == 0)
        }
    }

    /// The server goes away, closing its connections (cleanly, as a restart does), and comes back
    /// on the same port: the frames it did not answer go again and nothing is quarantined, since
    /// the probe finds no server while it is away.
    @Test func aServerGoneAndBackGetsEverythingWithoutQuarantine() async throws {
        let f = try await TeltonikaFixture(concurrency: 2)
        let port = f.server.port
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("356307042441013", count: 10))
            #expect(await f.server.waitUntil { $0.count >= 10 })
            // Acknowledged too before the server goes: a frame stored but not yet acknowledged
            // when the connection closes is rightly sent again, and this test counts copies.
            #expect(try await f.waitForStatus { $0.pending == 0 }.pending == 0, "the first ten acknowledged")
            f.server.stop()
            _ = await f.spool.append(movingTrack("356307042441013", count: 10, from: 10) + movingTrack("b", count: 10))
            let down = try await f.waitForStatus { $0.state == "probing" }
            #expect(down.state == "probing" && down.quarantined == 0, "\(down.lastError ?? "")")
            try f.server.start(port: port)
            #expect(
                await f.server.waitUntil(timeout: .seconds(20)) { $0.count >= 30 }, "delivered once the server is back")
            let after = try await f.waitForStatus { $0.pending == 0 }
            #expect(after.quarantined == 0)
        }
        #expect(f.storedByDevice["356307042441013"] == movingTrack("356307042441013", count: 20).map(\.timeMs))
        #expect(f.storedByDevice["b"] == movingTrack("b", count: 10).map(\.timeMs))
    }

    /// An answer that is not the frame's record count is not an acknowledgement: nothing settles,
    /// nothing is quarantined, the destination backs off.
    @Test func aCountThatIsNotTheFramesSettlesNothing() async throws {
        // Answers every connection at once with 0x01 and a count of 7, whatever was sent.
        let server = try GreetingServer(greeting: [0x01, 0, 0, 0, 7])
        defer { server.stop() }
        let f = try await TeltonikaFixture(concurrency: 1) { $0.url = "tcp://127.0.0.1:\(server.port)" }
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 3))
            let status = try await f.waitForStatus { $0.lastError != nil }
            #expect(
                status.lastError?.contains("answered 7 to a frame of 3 records") == true, "\(status.lastError ?? "")")
            #expect(status.pending == 3 && status.sent == 0 && status.quarantined == 0)
        }
    }

    @Test func anAlarmGoesAheadOfItsDevicesBacklog() async throws {
        let f = try await TeltonikaFixture(concurrency: 1)
        let device = "356307042441013"
        let backlog = movingTrack(device, count: 800, alarmAt: 799)
        _ = await f.spool.append(backlog + movingTrack("b", count: 5))
        try await f.withForwarder {
            #expect(await f.server.waitUntil { $0.count >= 805 })
            _ = try await f.waitForStatus { $0.pending == 0 }
        }
        let received = f.server.positions.filter { $0.uniqueId == device }
        // SOS arrives as Traccar's general alarm, with the panic priority.
        #expect(received.first?.fixTimeMs == backlog[799].timeMs)
        #expect(
            received.first?.attributes["alarm"] == .string("general")
                && received.first?.attributes["priority"] == .number(2))
        #expect(received.count == 800, "the alarm once, not again in its turn")
        #expect(Array(received.dropFirst().map(\.fixTimeMs)) == backlog.prefix(799).map(\.timeMs))
    }

    @Test func replayedHistoryIsSentWhenNothingLiveWaits() async throws {
        let f = try await TeltonikaFixture(concurrency: 1)
        let track = movingTrack("356307042441013", count: 300)
        try await f.withForwarder {
            _ = await f.spool.append(track)
            #expect(await f.server.waitUntil { $0.count >= 300 })
            try await f.waitForStatus { $0.pending == 0 }
            f.server.clear()
            let seqs = try f.spool.makeReader().positions(after: 0, limit: 1000).map(\.seq)
            #expect(try await f.spool.queueReplay(destination: f.settings.name, seqs: seqs) == 300)
            // A live position wakes the forwarder (an idle one notices a replay within 30 s); the replay follows it.
            _ = await f.spool.append(movingTrack("wake", count: 1))
            #expect(await f.server.waitUntil { $0.count >= 301 }, "the replay arrived")
            let status = try await f.waitForStatus { $0.replayPending == 0 }
            #expect(status.replayPending == 0)
        }
        let stored = f.storedByDevice["356307042441013"] ?? []
        #expect(
            stored == track.map(\.timeMs),
            "\(stored.count) stored, first \(stored.first ?? 0), last \(stored.last ?? 0)")
    }

    /// `buffer: false`: each position goes once when it arrives; what fails is dropped.
    @Test func realTimeOnlyDestinationDropsWhatFails() async throws {
        let f = try await TeltonikaFixture(buffer: false, concurrency: 1)
        try await f.withForwarder {
            // The forwarder starts where the spool ends; it records its state once it has read that.
            let started = try await f.waitForStatus { $0.updatedMs != nil }
            #expect(started.updatedMs != nil)
            f.server.setBehaviour(.closeWithoutAnswer)
            _ = await f.spool.append(movingTrack("356307042441013", count: 2))
            #expect(await f.server.waitForStatistics { $0.closedByServer >= 1 }, "the first two were refused")
            f.server.setBehaviour(.normal)
            _ = await f.spool.append(movingTrack("356307042441013", count: 1, from: 2))
            #expect(await f.server.waitUntil { $0.count >= 1 })
        }
        #expect(f.server.positions.map(\.fixTimeMs) == [movingTrack("356307042441013", count: 1, from: 2)[0].timeMs])
    }

    @Test(arguments: [
        ("tcp://traccar.example.org:5027", "telnet://traccar.example.org:5027"),
        ("tcp://traccar.example.org", "telnet://traccar.example.org:5027"),
        ("TCP://10.0.0.1:6000/", "telnet://10.0.0.1:6000"),
        ("tls://traccar.example.org:5443", "https://traccar.example.org:5443"),
        ("tls://[::1]", "https://[::1]:5027"),
        ("tcp://[::1]:7000", "telnet://[::1]:7000"),
    ])
    func urlsMapToWhatLibcurlConnects(url: String, curl: String) throws {
        #expect(try TeltonikaSession.Endpoint.curlURL(url) == curl)
    }

    @Test(arguments: ["http://traccar.example.org:5027", "tcp://", "tcp://user@host:1", "tcp://host:1/path"])
    func urlsThatAreNotATeltonikaPortAreRefused(url: String) {
        #expect(throws: CurlError.self) { try TeltonikaSession.Endpoint.curlURL(url) }
    }
}

/// The probe a Teltonika destination backs off with, and the canary's way of telling the server from the link.
@Suite(.offThePool) struct TeltonikaProbeTests {
    /// - Parameter timeout: short where nothing is meant to answer; generous where the fake does,
    ///   whose accept thread a loaded `make test` can keep from running for seconds.
    func probe(url: String, timeout: Double = 0.5) throws -> TeltonikaProbe {
        var settings = Configuration.DestinationSettings()
        settings.traccarProtocol = .teltonika
        settings.url = url
        settings.connectTimeoutSeconds = timeout
        return try TeltonikaProbe(settings: settings)
    }

    @Test func traccarsAnswerToTheProbeIdProvesTheServer() async throws {
        let server = try FakeTeltonikaServer()
        defer { server.stop() }
        let probe = try probe(url: "tcp://127.0.0.1:\(server.port)", timeout: 30)
        let (answer, wireBytes) = await probe.check()
        #expect(answer == .server)
        #expect(wireBytes == 17, "16 bytes of identification, 1 of answer")
        #expect(server.statistics.identifications.map(\.uniqueId) == [TeltonikaProbe.uniqueID])
        #expect(server.positions.isEmpty)
    }

    @Test func aRefusedConnectionIsNothing() async throws {
        let server = try FakeTeltonikaServer()
        let port = server.port
        server.stop()
        let probe = try probe(url: "tcp://127.0.0.1:\(port)")
        #expect(await probe.check().answer == .nothing)
    }

    @Test func aConnectionNothingAnswersIsNothing() async throws {
        let server = try FakeTeltonikaServer()
        defer { server.stop() }
        let proxy = try FaultProxy(targetPort: server.port)
        defer { proxy.stop() }
        proxy.setMode(.blackHole)
        let probe = try probe(url: "tcp://127.0.0.1:\(proxy.port)")
        // Bounded by its own timeouts (a second or two here), not by the test: a hang fails this
        // test within its limit; how fast is the benchmark's business, not a test's.
        let started = ContinuousClock.now
        #expect(await probe.check().answer == .nothing)
        // 180 s, not the probe's few: under make test other suites can hold the cooperative pool
        // for over a minute before this task resumes (70 s seen), which is not the probe hanging.
        #expect(ContinuousClock.now - started < .seconds(180), "a black-holed probe must end by its own timeouts")
        #expect(proxy.counters.probesWhileDown == 1)
    }

    /// Something that answers, but not as Traccar does (an HTTP server on the port): there is a path.
    @Test func anythingElseAnsweringIsAPath() async throws {
        let server = try GreetingServer(greeting: Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8))
        defer { server.stop() }
        let probe = try probe(url: "tcp://127.0.0.1:\(server.port)")
        #expect(await probe.check().answer == .path)
    }
}

/// A TCP server on loopback that greets every connection with the same bytes as soon as it
/// accepts it, on its own thread, whatever the client sends: a server of another protocol.
final class GreetingServer: Sendable {
    let port: Int
    private let listener: Int32

    init(greeting: [UInt8]) throws {
        let bound = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 8)
        (listener, port) = (bound.descriptor.release(), bound.port)
        let listener = self.listener
        Thread {
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 { return }
                _ = greeting.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                // Closed at once, the greeting could be lost to a reset; the client closes its end.
                Thread {
                    var buffer = [UInt8](repeating: 0, count: 256)
                    while recv(client, &buffer, buffer.count, 0) > 0 {}
                    close(client)
                }.start()
            }
        }.start()
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}

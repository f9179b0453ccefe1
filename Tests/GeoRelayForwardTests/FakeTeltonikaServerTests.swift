import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

@testable import GeoRelayForward

/// The fake Teltonika port against Traccar's own test frames, and the codec against the fake,
/// over real loopback TCP.
@Suite(.offThePool) struct FakeTeltonikaServerTests {
    static let imei = "356307042441013"

    /// A connection that has identified `imei` and been answered `0x01`.
    func identified(_ server: FakeTeltonikaServer, id: String = FakeTeltonikaServerTests.imei) throws -> TCPTestClient {
        let client = try TCPTestClient(port: server.port)
        try client.write(try TeltonikaCodec.identification(uniqueID: id))
        #expect(client.read(1) == .bytes([1]), "identification of \(id) answered")
        return client
    }

    func frame(_ positions: [Position]) -> [UInt8] {
        TeltonikaCodec.dataFrame(records: positions.map { TeltonikaCodec.record(from: $0) })
    }

    func position(_ index: Int) -> Position {
        Position(
            device: Self.imei, timeMs: 1_700_000_000_000 + Int64(index) * 1000, lat: 59.9 + Double(index) * 1e-4,
            lon: 10.7)
    }

    @Test(arguments: TraccarTeltonikaFrames.all)
    func traccarFramesAreDecodedAndAnswered(hex: String) async throws {
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        let frame = bytes(hex: hex)
        try client.write(frame)
        #expect(client.read(4) == .bytes([0, 0, 0, frame[9]]))
        #expect(server.positions.count == Int(frame[9]))
        #expect(server.positions.allSatisfy { $0.uniqueId == Self.imei && $0.connection == 1 })
    }

    @Test func fieldsAsTraccarStoresThem() throws {
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        try client.write(bytes(hex: TraccarTeltonikaFrames.oneRecord))
        #expect(client.read(4) == .bytes([0, 0, 0, 1]))
        let stored = try #require(server.positions.first)
        #expect(stored.fixTimeMs == 1_730_890_637_000)
        #expect(stored.lat == -6.2906716 && stored.lon == 106.8097266)
        #expect(stored.altitude == 13 && stored.course == 0 && stored.speedKnots == 0)
        #expect(stored.satellites == 4 && stored.valid)
        let expected: [String: AttributeValue] = [
            "priority": .number(0), "sat": .number(4), "event": .number(0),
            "ignition": .bool(false), "motion": .bool(false), "rssi": .number(5),
            "pdop": .number(1.9), "hdop": .number(1.7), "power": .number(12.458), "battery": .number(4.023),
            "operator": .number(51010), "odometer": .number(329),
            // Not mapped for a device with no model: FMB-only ids and unknown ones.
            "io200": .number(0), "io69": .number(1), "io68": .number(0),
            "io10804": .number(73), "io10808": .number(0), "io10800": .number(64349),
        ]
        #expect(stored.attributes == expected)
    }

    @Test func variableSectionAsTraccarStoresIt() throws {
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        for hex in [
            TraccarTeltonikaFrames.withVIN, TraccarTeltonikaFrames.twoRecords, TraccarTeltonikaFrames.tagVoltage,
            TraccarTeltonikaFrames.tagBattery,
        ] {
            let frame = bytes(hex: hex)
            try client.write(frame)
            #expect(client.read(4) == .bytes([0, 0, 0, frame[9]]))
        }
        let stored = server.positions
        try #require(stored.count == 5)
        #expect(stored[0].attributes["vin"] == .string("1A1JC5444R7252367"))
        #expect(stored[1].attributes["driverUniqueId"] == nil, "a zero driver id is not stored")
        let tags = stored[2].attributes
        #expect(tags["tag1Name"] == .string("Nevera_3" + String(repeating: "\u{0}", count: 7)))
        #expect(tags["tag1Mac"] == .string("7cd9f4110c40"))
        #expect(
            tags["tag1Temp"] == .number(3215) && tags["tag1Humidity"] == .number(52)
                && tags["tag1Battery"] == .number(3100))
        #expect(tags["tag3Battery"] != nil && tags["tag4Name"] == nil)
        // The values Traccar's own test asserts for these frames.
        #expect(stored[3].attributes["tag1Voltage"] == .number(3090))
        #expect(stored[4].attributes["tag1Battery"] == .number(3030))
    }

    @Test func positionsTravelThroughTheCodec() throws {
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        let sent = Position(
            device: Self.imei, timeMs: 1_700_000_000_250, lat: 59.9138682, lon: 10.7522454,
            speed: 13.9, course: 359.6, altitude: 12.4, accuracy: 8, battery: 87.4, charging: true, alarm: "sos",
            attributes: [
                Attribute("hdop", .number(0.84)), Attribute("motion", .bool(true)), Attribute("power", .number(12.6)),
                Attribute("battery", .number(4.1)), Attribute("odometer", .number(123_456.7)),
                Attribute("driverName", .string("alice")),
            ])
        try client.write(frame([sent]))
        #expect(client.read(4) == .bytes([0, 0, 0, 1]))
        let stored = try #require(server.positions.first)
        #expect(stored.uniqueId == Self.imei && stored.fixTimeMs == 1_700_000_000_250)
        #expect(abs(stored.lat - 59.9138682) < 1e-9 && abs(stored.lon - 10.7522454) < 1e-9)
        #expect(stored.speedKnots == 50 * 0.539957, "13.9 m/s is 50.04 km/h, sent as 50")
        #expect(stored.course == 0 && stored.altitude == 12)
        #expect(stored.satellites == 3 && stored.valid)
        let expected: [String: AttributeValue] = [
            "priority": .number(2), "sat": .number(3), "event": .number(236),
            "alarm": .string("general"), "hdop": .number(0.8), "motion": .bool(true),
            "power": .number(12.6), "battery": .number(4.1), "odometer": .number(123_457),
            // The battery level needs an FMB model on the Traccar device to be named batteryLevel.
            "io113": .number(87),
        ]
        #expect(stored.attributes == expected)
    }

    @Test func invalidWhenNoSatellites() throws {
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        let position = Position(
            device: Self.imei, timeMs: 1_700_000_000_000, lat: 1, lon: 2, attributes: [Attribute("valid", .bool(false))]
        )
        try client.write(frame([position]))
        #expect(client.read(4) == .bytes([0, 0, 0, 1]))
        #expect(server.positions.first?.valid == false)
    }

    @Test func fullFrameOf255() throws {
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        let positions = (0..<255).map(position)
        try client.write(frame(positions))
        #expect(client.read(4) == .bytes([0, 0, 0, 255]))
        #expect(server.positions.map(\.fixTimeMs) == positions.map(\.timeMs))
        #expect(server.statistics.framesAnswered == 1)
    }

    @Test func unknownDeviceGetsZeroAndItsFramesGoUnanswered() throws {
        let server = try FakeTeltonikaServer()
        server.setUnknownDevices(["999"])
        let client = try TCPTestClient(port: server.port)
        try client.write(try TeltonikaCodec.identification(uniqueID: "999") + frame([position(0)]))
        #expect(client.read(1) == .bytes([0]))
        // Traccar drops the frame without a word and keeps the connection: the next answer on
        // the wire is the one to this known id, not a count.
        try client.write(try TeltonikaCodec.identification(uniqueID: Self.imei))
        #expect(client.read(1) == .bytes([1]))
        #expect(server.positions.isEmpty)
        try client.write(frame([position(1)]))
        #expect(client.read(4) == .bytes([0, 0, 0, 1]))
        #expect(server.positions.map(\.uniqueId) == [Self.imei])
        #expect(server.statistics.identifications.map(\.known) == [false, true])
    }

    @Test func shortIdentificationWaitsForTwelveBytes() async throws {
        let server = try FakeTeltonikaServer()
        let client = try TCPTestClient(port: server.port)
        let id = try TeltonikaCodec.identification(uniqueID: "abc")
        try client.write(id)
        // Once the fake has counted the 5 bytes it has decoded all it could from them: nothing.
        #expect(await server.waitForStatistics(timeout: .seconds(10)) { $0.bytesReceived == 5 }, "the 5 bytes arrive")
        #expect(server.statistics.identifications.isEmpty, "5 bytes are fewer than the 12 Traccar waits for")
        try client.write(frame([position(0)]))
        #expect(client.read(1) == .bytes([1]))
        #expect(client.read(4) == .bytes([0, 0, 0, 1]))
    }

    @Test func shortIdentificationAndFirstFrameInOneWrite() throws {
        let server = try FakeTeltonikaServer()
        let client = try TCPTestClient(port: server.port)
        let id = try TeltonikaCodec.identification(uniqueID: "abc")
        #expect(TeltonikaCodec.identificationNeedsCompanion(id))
        try client.write(id + frame([position(0), position(1)]))
        #expect(client.read(5) == .bytes([1, 0, 0, 0, 2]))
        #expect(server.positions.map(\.uniqueId) == ["abc", "abc"])
    }

    @Test func frameSplitAcrossManyWritesIsReassembled() async throws {
        let server = try FakeTeltonikaServer()
        let client = try TCPTestClient(port: server.port)
        // A device's one-byte ping first, which Traccar's frame decoder cuts off and ignores.
        let stream = [0xFF] + (try TeltonikaCodec.identification(uniqueID: Self.imei)) + frame((0..<3).map(position))
        for byte in stream { try client.write([byte]) }
        #expect(client.read(5) == .bytes([1, 0, 0, 0, 3]))
        #expect(server.positions.count == 3)
        #expect(
            await server.waitForStatistics(timeout: .seconds(10)) { $0.bytesReceived == stream.count },
            "every byte of the stream counted")
    }

    @Test func frameShorterThanItsLengthWaitsForTheRest() async throws {
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        let whole = frame([position(0)])
        try client.write(Array(whole.dropLast(6)))
        let sent = 17 + whole.count - 6
        #expect(
            await server.waitForStatistics(timeout: .seconds(10)) { $0.bytesReceived == sent },
            "the partial frame arrives")
        #expect(
            server.statistics.framesAnswered == 0 && server.statistics.closedByServer == 0,
            "Traccar waits, it does not close")
        try client.write(Array(whole.suffix(6)))
        #expect(client.read(4) == .bytes([0, 0, 0, 1]))
    }

    /// Traccar does not check these, so the fake does not either: the relay cannot count on
    /// the server to reject a corrupted frame.
    @Test func crcAndCodecIDAreNotChecked() throws {
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        var badCRC = frame([position(0)])
        badCRC[badCRC.count - 1] ^= 0xFF
        try client.write(badCRC)
        #expect(client.read(4) == .bytes([0, 0, 0, 1]))
        // A record with no IO read as codec 8 uses fewer bytes than it has: no error.
        var unknownCodec = frame([position(1)])
        unknownCodec[8] = 0x99
        try client.write(unknownCodec)
        #expect(client.read(4) == .bytes([0, 0, 0, 1]))
        #expect(server.positions.count == 2)
    }

    static let malformed: [(name: String, bytes: [UInt8])] = {
        let one = bytes(hex: TraccarTeltonikaFrames.oneRecord)
        var moreRecordsThanSent = one
        moreRecordsThanSent[9] = 2
        // Codec 0x99 is read as codec 8: 1-byte counts, so after the 24-byte GPS element the
        // bytes 01 00 00 FF say event 1, no total, no 1-byte elements, 255 2-byte elements.
        let unknownCodec: [UInt8] =
            [0, 0, 0, 0, 0, 0, 0, 0x1F, 0x99, 0x01] + [UInt8](repeating: 0, count: 24) + [0x01, 0x00, 0x00, 0xFF] + [
                0x01, 0, 0, 0, 0,
            ]
        // A data length of -16 makes a negative slice.
        let negativeLength: [UInt8] = [0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xF0, 0x8E, 0x01, 0, 0]
        // Claims 40 000 bytes: Traccar gives up once more than 32 768 are buffered.
        let tooLong: [UInt8] = [0, 0, 0, 0, 0, 0, 0x9C, 0x40] + [UInt8](repeating: 0, count: 33_000)
        // Codec 12 (command answers) is not modelled; the fake says so by closing.
        return [
            ("count beyond the records sent", moreRecordsThanSent),
            ("unknown codec id read past the end", unknownCodec),
            ("negative data length", negativeLength),
            ("frame longer than 32 KiB", tooLong),
        ]
    }()

    @Test(arguments: malformed.indices)
    func malformedFrameClosesWithoutAnswer(index: Int) async throws {
        let (name, bytes) = Self.malformed[index]
        let server = try FakeTeltonikaServer()
        let client = try identified(server)
        // The fake may close before the last bytes are written.
        try? client.write(bytes)
        #expect(client.readToEnd() == .closed(after: []), "\(name): closed with nothing answered")
        #expect(
            await server.waitForStatistics(timeout: .seconds(10)) { $0.closedByServer == 1 },
            "\(name): the server counts the close")
        #expect(server.positions.isEmpty, "\(name): nothing kept")
    }

    @Test func storeThenCloseKeepsTheFrameButLosesTheAnswer() async throws {
        let server = try FakeTeltonikaServer()
        server.setBehaviour(.storeThenClose)
        let client = try identified(server)
        try client.write(frame([position(0)]))
        #expect(client.readToEnd() == .closed(after: []), "closed before the answer")
        #expect(server.positions.count == 1)
        server.setBehaviour(.closeWithoutAnswer)
        let again = try identified(server)
        try again.write(frame([position(0)]))
        #expect(again.readToEnd() == .closed(after: []), "closed with nothing kept or answered")
        #expect(server.positions.count == 1)
        #expect(server.statistics.connections == 2)
    }

    /// The destination going away and coming back: once stopped, the port refuses (a stopped fake
    /// must not accept into a backlog nobody reads, where a client would wait for answers until its
    /// timeout), an open connection is ended, and the fake listens on the same port again at once.
    @Test func stopRefusesAtOnceAndStartServesTheSamePortAgain() throws {
        let server = try FakeTeltonikaServer()
        defer { server.stop() }
        let port = server.port
        let open = try identified(server)
        server.stop()
        #expect(open.readToEnd() == .closed(after: []), "the open connection is ended")
        let refused = IPv4Socket.connect(host: "127.0.0.1", port: port)
        let code = errno
        try? refused?.close()
        #expect(refused == nil && code == ECONNREFUSED, "connecting to a stopped fake is refused, not left unanswered")
        try server.start(port: port)
        #expect(server.port == port)
        let again = try identified(server)
        try again.write(frame([position(0)]))
        #expect(again.read(4) == .bytes([0, 0, 0, 1]))
        #expect(server.statistics.connections == 2)
    }
}

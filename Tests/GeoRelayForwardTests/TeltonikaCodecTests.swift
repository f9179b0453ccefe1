import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// Frames from Traccar's `TeltonikaProtocolDecoderTest` (traccar/traccar,
/// src/test/java/org/traccar/protocol/), which its decoder is tested against.
enum TraccarTeltonikaFrames {
    /// The identification `verifyNull` expects no position from: IMEI 123456789012345.
    static let identification = "000F313233343536373839303132333435"
    /// Codec 8E, one record (the frame Traccar checks `eyeTemp1` on with model FMB130).
    static let oneRecord =
        "00000000000000628e0100000193011f1ec8003fa9def2fc401ea4000d00000400000000000f000700ef0000f00000150500c8000045012a34492a3800000600b5001300b60011004230aa00430fb7004400002a30fb5d000200f10000c74200100000014900000000010000fbff"
    /// Codec 8E, one record with a VIN in the variable-length section.
    static let withVIN =
        "00000000000000818e0100000166e368a510000f0d8b5b20961c35008d010308000000000014000900ef0000f00100500100150400c800004501001e00002500002900000a00b5000800b60007004230dc0018000000430fcb0044005f001103de001200e50013001200240000000000000001010000113141314a433534343452373235323336370100005e99"
    /// Codec 8E, two records: the second carries only a BLE tag list (IO 11317).
    static let twoRecords =
        "000000000000010e8e020000019769de9f9800015299f718b278040018007708000000000013000b00ef0100f00000150500c80000450100010100b30000020000030000b401017c00000500b5001a00b6000c004238d40043000000440000000200f10000539b00100000efc70001004e000000000000000000000000019769de5d3b00015299f718b27804001800770800002c350001000000000000000000012c3500700124050f4e65766572615f33000000000000000f067cd9f4110c4006020c8f0701340e020c1c24050f4e65766572615f31000000000000000f067cd9f411334606020c380701340e020c2624050f4e65766572615f32000000000000000f067cd9f411464706020c240701360e020c26020000a8b0"
    /// Codec 8E; Traccar's test expects `tag1Voltage` 3090.
    static let tagVoltage =
        "00000000000000768e010000018fdc4b27cb015b3e33ceefa529030009013f0e0000022400010000000000000000000102240049010f0001c60106babbf36300550202806d0f0001ca01063456555565690202806b0f0001d10106467975425450020280690b0001c90106fa54ba8d00550b0001cf0106cabbf36300550100005455"
    /// Codec 8E; Traccar's test expects `tag1Battery` 3030.
    static let tagBattery =
        "000000000000004b8e010000018368952793000f0e54fc209ab05800b300b40e00002a4f0001000000000000000000012a4f001e011c0001a40110eb47706aa38255aa96f21a154e2d00550d01000e020bd6010000823f"

    /// Codec 16, two records, whose CRC is wrong (0x09A5; the bytes give 0xA6DE): Traccar's
    /// test still expects its positions, because the decoder never checks the CRC.
    static let wrongCRC =
        "000000000000009D10020000013feb55ff74000f0ea850209a690000AE00B90B00000000070A050001000002000003000004000120000200180000004601290200C700000000004C0000000001003E00000000000000000000015B198C7498000F0DBC502095872F00AE00B90B00000000070A050001000002000003000004000120000200180000004601290200C700000000004C0000000001003E000000000000000002000009A5"

    /// Every codec 8, 8E and 16 frame in the test class whose length field matches its size,
    /// whose CRC is right, and that decodes with `protocol.extended` off (Traccar's default).
    static let withRightCRC: [String] = [
        oneRecord, withVIN, twoRecords, tagVoltage, tagBattery,
        "00000000000000728e010000018b23dd796300fbf7263c24f9e11a0000000000000002240001000000000000000000010224004501210001e50110cde39f7e42bb55aa788e4a29ed650055020ab70a8f264c6000ffff6b210001b00110f89b907e42bb55aaa3463b29ed650055020ab708bb2600ae0500096c01000051d4",
        "00000000000000a28e0100000183ac617e3001123eb99b1e142db4000000000000000000001d000900f000005000001503004500011e1801212d01242a012722012a18001100b5000000b600000018000000cd151000431c2d011f6981012047d701226981012347d901256981012647d8012869810129e6f304b0000304b1000304b2000304b30003000100f10000639d0002000b0000000214bf12fe000e0000000029d18c95000001000051b6",
        "00000000000000b98e0200000179555c7bf8010b3a1cfbebc142b00000000000000000ec000f000900f00000150000c80000450200710100740001070100fa0000ec01000500b500000018000000430d560044000000190000000100f1000000000000000000000179555c83c8010b3a1cfbebc142b0000000000000000185000f000900f00000150000c80000450200710100740001070100fa00018511000500b500000018000000430d560044000000190000000100f100000000000000000200003251",
        "00000000000000a38e0100000178b11c9e1000040bbbc91f03190c002100e113001300000010000600ef0100f00100150300c800004501001e070005004237e00018000a00ce166200430f970024059f000300f10000665900c70000001e00100000a1b500000002010000115756315a5a5a32455a38363031353338380119002950303239392c50303637352c50303637342c50303637322c50303637312c50303437312c50324241430100001ad8",
        "00000000000000858e0200000174431aadc100061d888f21000e8a0032002e0c000001810001000000000000000000010181001711210102030405060708090a0b0c0d0e0f10020b010ad000000174431a389100061d888f21000e8a0033002e0d000001810001000000000000000000010181001711210102030405060708090a0b0c0d0e0f10020b010ad2020000492b",
        "00000000000000e708030000018293d62060000de1f6a62159767e00000000000000000b074504f00050041500c801ef004f630342320043000344000001f100006019000000018291b0c790000de1f6a62159767e006e0144070000ef12074503f00050051505c800ef004f0207b5000eb6000b423324180000ce00dc43001144000004c700000007f100006019cd0003c7776300ea4e2e000000018291aff0b8000de1f91f21597405006f00f61300080012074503f00150051504c800ef014f0207b50009b600054236c1180008ce00dc43003f44000004c700000003f100006019cd0003c7776300ea4e2700030000a48d",
        "000000000000004c08010000016818d500580009c28d9f1cb3757a00be00c60f0053000f06f0011503c80001011d00fc0007423799180053cdf80dce426f430f88190bb8560bb802f100005aa110002887e000010000ee8d",
        "000000000000009F100100000164D855401800D5E3B744EC11C762023B011A060000000007200A010000010500010600010D00010E00010F00011600011700011800011F001301010000010700000108000001090000010A0000010B0000010C000001100000011100000112000001130000011400000115000001190000011A0000011B0000011C0000011D0000011E000003010200000000010300000000010400000000000100000D3B",
        "000000000000009f080400000159738f76b8012e13b796110ab27600d700000b00004e01000000014e000000000000000000000159738f6ee8012e13b796110ab27600d700000a00004e01000000014e01000b00791c179300000159738f6b00012e13b796110ab27600d700000a00004e01000000014e000000000000000000000159738f5f48012e13b796110ab27600d700000b00004e01000000014e01000b00791c17930400009671",
        "0000000000000035080100000161f37c50500020de5ba60ef11450000000000000000006040100b300b400ef000109002000014e0000000000000000010000be52",
        "000000000000004a08010000015ebc1da508002411926621f15246010b00b913005e000f06ef01f00150011505c800450108b5000bb6000642381b18005ecd0318ce19cd430f5844000001f1000061a900010000c8e1",
    ]

    static let all = withRightCRC + [wrongCRC]
}

/// Bytes from a hex string (Traccar's tests write frames this way).
func bytes(hex: String) -> [UInt8] {
    let digits = Array(hex.utf8)
    func value(_ c: UInt8) -> UInt8 {
        switch c {
        case 48...57: c - 48
        case 65...70: c - 55
        default: c - 87
        }
    }
    return stride(from: 0, to: digits.count, by: 2).map { value(digits[$0]) << 4 | value(digits[$0 + 1]) }
}

@Suite(.offThePool) struct TeltonikaCodecTests {
    typealias IO = TeltonikaCodec.IOElements

    @Test(arguments: TraccarTeltonikaFrames.withRightCRC)
    func crcMatchesTraccarFrames(hex: String) throws {
        let frame = bytes(hex: hex)
        let crc = TeltonikaCodec.crc16IBM(frame[8..<(frame.count - 4)])
        #expect(Array(frame.suffix(4)) == [0, 0, UInt8(crc >> 8), UInt8(crc & 0xFF)])
    }

    @Test func crcIsCRC16ARC() {
        // The catalogue check value of CRC-16/ARC, the same algorithm as Traccar's CRC16_IBM.
        #expect(TeltonikaCodec.crc16IBM(Array("123456789".utf8)) == 0xBB3D)
        let wrong = bytes(hex: TraccarTeltonikaFrames.wrongCRC)
        #expect(TeltonikaCodec.crc16IBM(wrong[8..<(wrong.count - 4)]) == 0xA6DE)
    }

    /// The records of Traccar's test frames, field by field; the encoder must rebuild each
    /// frame byte for byte (length, both counts, the IO total, the CRC).
    static let rebuilt: [(hex: String, records: [TeltonikaCodec.Record])] = [
        (
            TraccarTeltonikaFrames.oneRecord,
            [
                .init(
                    timeMs: 1_730_890_637_000, longitudeE7: 1_068_097_266, latitudeE7: -62_906_716, altitude: 13,
                    angle: 0, satellites: 4,
                    io: IO(
                        oneByte: [
                            .init(239, 0), .init(240, 0), .init(21, 5), .init(200, 0), .init(69, 1), .init(10804, 73),
                            .init(10808, 0),
                        ],
                        twoBytes: [
                            .init(181, 19), .init(182, 17), .init(66, 12458), .init(67, 4023), .init(68, 0),
                            .init(10800, 64349),
                        ],
                        fourBytes: [.init(241, 51010), .init(16, 329)]))
            ]
        ),
        (
            TraccarTeltonikaFrames.withVIN,
            [
                .init(
                    timeMs: 1_541_413_578_000, longitudeE7: 252_545_883, latitudeE7: 546_708_533, altitude: 141,
                    angle: 259, satellites: 8,
                    io: IO(
                        oneByte: [
                            .init(239, 0), .init(240, 1), .init(80, 1), .init(21, 4), .init(200, 0), .init(69, 1),
                            .init(30, 0), .init(37, 0), .init(41, 0),
                        ],
                        twoBytes: [
                            .init(181, 8), .init(182, 7), .init(66, 12508), .init(24, 0), .init(67, 4043),
                            .init(68, 95), .init(17, 990), .init(18, 229), .init(19, 18), .init(36, 0),
                        ],
                        variable: [.init(256, Array("1A1JC5444R7252367".utf8))]))
            ]
        ),
        (
            TraccarTeltonikaFrames.twoRecords,
            [
                .init(
                    timeMs: 1_749_827_887_000, longitudeE7: 22_190_583, latitudeE7: 414_349_316, altitude: 24,
                    angle: 119, satellites: 8,
                    io: IO(
                        oneByte: [
                            .init(239, 1), .init(240, 0), .init(21, 5), .init(200, 0), .init(69, 1), .init(1, 1),
                            .init(179, 0), .init(2, 0), .init(3, 0), .init(180, 1), .init(380, 0),
                        ],
                        twoBytes: [.init(181, 26), .init(182, 12), .init(66, 14548), .init(67, 0), .init(68, 0)],
                        fourBytes: [.init(241, 21403), .init(16, 61383)],
                        eightBytes: [.init(78, 0)])),
                .init(
                    timeMs: 1_749_827_870_011, longitudeE7: 22_190_583, latitudeE7: 414_349_316, altitude: 24,
                    angle: 119, satellites: 8, eventID: 11317,
                    io: IO(
                        variable: [
                            .init(
                                11317,
                                bytes(
                                    hex:
                                        "0124050f4e65766572615f33000000000000000f067cd9f4110c4006020c8f0701340e020c1c24050f4e65766572615f31000000000000000f067cd9f411334606020c380701340e020c2624050f4e65766572615f32000000000000000f067cd9f411464706020c240701360e020c26"
                                ))
                        ])),
            ]
        ),
    ]

    @Test(arguments: rebuilt.indices)
    func encoderRebuildsTraccarFrames(index: Int) {
        let (hex, records) = Self.rebuilt[index]
        #expect(TeltonikaCodec.dataFrame(records: records) == bytes(hex: hex))
    }

    @Test func identificationIsLengthThenASCII() throws {
        #expect(
            try TeltonikaCodec.identification(uniqueID: "123456789012345")
                == bytes(hex: TraccarTeltonikaFrames.identification))
        #expect(
            !TeltonikaCodec.identificationNeedsCompanion(try TeltonikaCodec.identification(uniqueID: "123456789012345"))
        )
        // 2 + 10 bytes is exactly what Traccar's frame decoder waits for; one less is not.
        #expect(!TeltonikaCodec.identificationNeedsCompanion(try TeltonikaCodec.identification(uniqueID: "0123456789")))
        let short = try TeltonikaCodec.identification(uniqueID: "abc")
        #expect(short == [0, 3, 0x61, 0x62, 0x63])
        #expect(TeltonikaCodec.identificationNeedsCompanion(short))
    }

    @Test(arguments: ["", "télé", String(repeating: "7", count: 1025)])
    func identificationRefusesIDsTraccarCannotRead(id: String) {
        #expect(throws: TeltonikaCodecError.self) { try TeltonikaCodec.identification(uniqueID: id) }
        #expect((try? TeltonikaCodec.identification(uniqueID: id)) == nil)
    }

    @Test func answers() throws {
        #expect(try TeltonikaCodec.identificationAnswer(0x01) == .known)
        #expect(try TeltonikaCodec.identificationAnswer(0x00) == .unknown)
        #expect(throws: TeltonikaCodecError.self) { try TeltonikaCodec.identificationAnswer(0x05) }
        #expect(try TeltonikaCodec.parseAcknowledgement([0, 0, 0, 0xFF]) == 255)
        #expect(try TeltonikaCodec.parseAcknowledgement([0, 0, 1, 0]) == 256)
        #expect(throws: TeltonikaCodecError.self) { try TeltonikaCodec.parseAcknowledgement([0, 0, 1]) }
    }

    @Test func fullFrameHolds255Records() throws {
        let positions = (0..<255).map {
            Position(device: "d", timeMs: 1_700_000_000_000 + Int64($0) * 1000, lat: 59.9, lon: 10.7, speed: 3)
        }
        let records = positions.map { TeltonikaCodec.record(from: $0) }
        let frame = TeltonikaCodec.dataFrame(records: records)
        #expect(frame[8] == 0x8E)
        #expect(frame[9] == 255)
        #expect(frame[frame.count - 5] == 255)
        let length = frame[4..<8].reduce(0) { $0 << 8 | Int($1) }
        #expect(length == frame.count - 12)
        // A position with no extras costs the bare record: 38 bytes.
        #expect(frame.count == TeltonikaCodec.frameOverheadBytes + 255 * TeltonikaCodec.minimumRecordBytes)
        #expect(TeltonikaCodec.recordsFitting(records + records) == 255)
        #expect(TeltonikaCodec.recordsFitting([TeltonikaCodec.Record]()) == 0)
    }

    @Test func recordsFittingStopsAtTraccarsFrameLimit() {
        // 1 000-byte variable elements: 1 042 bytes a record, so 31 fit in 32 768 bytes.
        let big = TeltonikaCodec.Record(
            timeMs: 0, longitudeE7: 0, latitudeE7: 0, satellites: 3,
            io: IO(variable: [.init(1000, [UInt8](repeating: 0, count: 1000))]))
        #expect(big.encodedSize == 1042)
        let count = TeltonikaCodec.recordsFitting(Array(repeating: big, count: 100))
        #expect(count == 31)
        #expect(
            TeltonikaCodec.dataFrame(records: Array(repeating: big, count: count)).count <= TeltonikaCodec.maxFrameBytes
        )
    }

    @Test(
        arguments: [
            (0.0, UInt16(0)), (0.13, 0), (0.14, 1), (10, 36), (13.9, 50), (-1, 0), (1e6, UInt16.max),
        ] as [(Double, UInt16)])
    func speedIsWholeKilometresPerHour(metresPerSecond: Double, kmh: UInt16) {
        #expect(
            TeltonikaCodec.record(from: Position(device: "d", timeMs: 0, lat: 0, lon: 0, speed: metresPerSecond))
                .speedKmh == kmh)
    }

    @Test(
        arguments: [
            (0.0, UInt16(0)), (0.4, 0), (359.4, 359), (359.6, 0), (360, 0), (-10, 350), (725, 5),
        ] as [(Double, UInt16)])
    func courseIsWholeDegrees(course: Double, angle: UInt16) {
        #expect(
            TeltonikaCodec.record(from: Position(device: "d", timeMs: 0, lat: 0, lon: 0, course: course)).angle == angle
        )
    }

    @Test(
        arguments: [
            (12.4, Int16(12)), (-12.6, -13), (40_000, Int16.max), (-40_000, Int16.min),
        ] as [(Double, Int16)])
    func altitudeIsWholeMetresClamped(altitude: Double, expected: Int16) {
        #expect(
            TeltonikaCodec.record(from: Position(device: "d", timeMs: 0, lat: 0, lon: 0, altitude: altitude)).altitude
                == expected)
    }

    @Test func fixedFields() {
        let record = TeltonikaCodec.record(
            from: Position(device: "d", timeMs: 1_700_000_000_123, lat: -33.86785, lon: 151.2099342))
        #expect(record.timeMs == 1_700_000_000_123)
        #expect(record.latitudeE7 == -338_678_500)
        #expect(record.longitudeE7 == 1_512_099_342)
        // Missing speed, course and altitude go as 0; no extras, no IO, priority low.
        #expect(record.speedKmh == 0 && record.angle == 0 && record.altitude == 0)
        #expect(record.io == IO())
        #expect(record.priority == .low && record.eventID == 0)
        #expect(record.satellites == TeltonikaCodec.defaultSatellites)
    }

    @Test(
        arguments: [
            ([], nil, UInt8(3)),
            ([Attribute("sat", .number(7))], nil, 7),
            ([Attribute("satellites", .number(11))], nil, 11),
            ([Attribute("sat", .number(0))], nil, 0),
            ([Attribute("sat", .number(7.5))], nil, 3),
            ([Attribute("valid", .bool(false)), Attribute("sat", .number(7))], nil, 0),
            ([Attribute("valid", .number(0))], nil, 0),
            ([Attribute("valid", .bool(true)), Attribute("sat", .number(7))], nil, 7),
            ([Attribute("valid", .number(1))], nil, 3),
            ([Attribute("sat", .number(7))], 9, 9),
            ([], 300, 255),
        ] as [([Attribute], Int?, UInt8)])
    func satellites(attributes: [Attribute], explicit: Int?, expected: UInt8) {
        let position = Position(device: "d", timeMs: 0, lat: 0, lon: 0, attributes: attributes)
        #expect(TeltonikaCodec.record(from: position, satellites: explicit).satellites == expected)
    }

    @Test func attributesGoInTheSectionTraccarReads() {
        let position = Position(
            device: "d", timeMs: 0, lat: 0, lon: 0, battery: 87.4,
            attributes: [
                Attribute("hdop", .number(0.84)), Attribute("pdop", .number(1.25)),
                Attribute("motion", .bool(true)), Attribute("ignition", .number(0)),
                Attribute("power", .number(12.6)), Attribute("battery", .number(4.1)),
                Attribute("odometer", .number(123_456.7)), Attribute("tripOdometer", .number(5000)),
                Attribute("rssi", .number(4)), Attribute("in2", .bool(true)), Attribute("out1", .bool(false)),
                // Left out: wrong type, does not fit, or no id Traccar names.
                Attribute("rssi", .number(-71)), Attribute("power", .string("12.6")),
                Attribute("driverName", .string("alice")), Attribute("fuel", .number(40)),
            ])
        let io = TeltonikaCodec.record(from: position).io
        // The last `rssi` (-71 dBm) wins, as Traccar's `set` would, and does not fit one byte.
        #expect(io.oneByte == [.init(2, 1), .init(179, 0), .init(239, 0), .init(240, 1), .init(113, 87)])
        // The last `power` is text, so no 66; `battery` the attribute is volts, 67.
        #expect(io.twoBytes == [.init(67, 4100), .init(181, 13), .init(182, 8)])
        #expect(io.fourBytes == [.init(16, 123_457), .init(199, 5000)])
        #expect(io.eightBytes.isEmpty && io.variable.isEmpty)
    }

    @Test(
        arguments: [
            ("general", [TeltonikaCodec.IOElement<UInt8>(236, 1)], UInt16(236), TeltonikaCodec.Priority.high),
            ("sos", [.init(236, 1)], 236, .panic),
            ("lowBattery,hardBraking", [.init(236, 1), .init(253, 2)], 236, .high),
            ("hardAcceleration", [.init(253, 1)], 253, .high),
            ("hardCornering,hardCornering", [.init(253, 3)], 253, .high),
            ("", [], 0, .low),
        ] as [(String, [TeltonikaCodec.IOElement<UInt8>], UInt16, TeltonikaCodec.Priority)])
    func alarms(
        alarm: String, elements: [TeltonikaCodec.IOElement<UInt8>], eventID: UInt16, priority: TeltonikaCodec.Priority
    ) {
        let record = TeltonikaCodec.record(from: Position(device: "d", timeMs: 0, lat: 0, lon: 0, alarm: alarm))
        #expect(record.io.oneByte == elements)
        #expect(record.eventID == eventID)
        #expect(record.priority == priority)
    }
}

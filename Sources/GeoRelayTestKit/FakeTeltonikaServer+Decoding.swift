import Foundation
import GeoRelayCore

// MARK: - Traccar's record decoding

extension FakeTeltonikaServer {
    private static let codec8: UInt8 = 0x08
    private static let codec8Extended: UInt8 = 0x8E
    private static let codec16: UInt8 = 0x10

    struct Unsupported: Error {}

    /// `decodeLocation` for every codec but GH3000, for a device with no model.
    static func decodeLocation(_ r: inout WireReader, codec: UInt8) throws -> Stored {
        if codec == 0x07 || codec == 0x0C || codec == 0x0D { throw Unsupported() }
        var attributes: [String: AttributeValue] = [:]
        let extended = codec == codec8Extended
        func ext(_ wide: Bool) throws -> Int { wide ? Int(try r.u16()) : Int(try r.u8()) }

        let time = Int64(bitPattern: try r.u64())
        attributes["priority"] = .number(Double(try r.u8()))
        let lon = Double(Int32(bitPattern: try r.u32())) / 10000000.0
        let lat = Double(Int32(bitPattern: try r.u32())) / 10000000.0
        let altitude = Double(Int16(bitPattern: try r.u16()))
        let course = Double(try r.u16())
        let satellites = Int(try r.u8())
        attributes["sat"] = .number(Double(satellites))
        let speedKnots = Double(try r.u16()) * 0.539957
        attributes["event"] = .number(Double(try ext(extended || codec == codec16)))
        if codec == codec16 { _ = try r.u8() } // generation type
        _ = try ext(extended) // total IO data records

        for width in [1, 2, 4] {
            let count = try ext(extended)
            for _ in 0..<count {
                try parameter(id: try ext(extended || codec == codec16), width: width, &r, &attributes)
            }
        }
        if codec == codec8 || extended || codec == codec16 {
            let count = try ext(extended)
            for _ in 0..<count {
                try parameter(id: try ext(extended || codec == codec16), width: 8, &r, &attributes)
            }
        }
        if extended {
            let count = Int(try r.u16())
            for _ in 0..<count {
                let id = Int(try r.u16())
                let length = Int(try r.u16())
                try variable(id: id, try r.slice(length), &attributes)
            }
        }
        return Stored(
            uniqueId: "", fixTimeMs: time, valid: satellites != 0, lat: lat, lon: lon, speedKnots: speedKnots,
            course: course, altitude: altitude, satellites: satellites, attributes: attributes, connection: 0)
    }

    /// `decodeParameter`: a handler registered for every model reads its own width, then the
    /// reader moves to where the section's width ends the element; any other id is `io<id>`.
    private static func parameter(id: Int, width: Int, _ r: inout WireReader, _ a: inout [String: AttributeValue])
        throws
    {
        let start = r.index
        func number(_ key: String, _ value: Double) { a[key] = .number(value) }
        func flag(_ key: String) throws { a[key] = .bool(try r.u8() > 0) }
        func alarm(_ name: String?) {
            guard let name else { return }
            a["alarm"] = .string(a["alarm"].map { $0.text + "," + name } ?? name)
        }
        switch id {
        case 1, 2, 3, 4: try flag("in\(id)")
        case 16: number("odometer", Double(try r.u32()))
        case 17: number("axisX", Double(Int16(bitPattern: try r.u16())))
        case 18: number("axisY", Double(Int16(bitPattern: try r.u16())))
        case 19: number("axisZ", Double(Int16(bitPattern: try r.u16())))
        case 21: number("rssi", Double(try r.u8()))
        case 25, 26, 27, 28: number("bleTemp\(id - 24)", Double(Int16(bitPattern: try r.u16())) / 100.0)
        case 66: number("power", Double(try r.u16()) / 1000.0)
        case 67: number("battery", Double(try r.u16()) / 1000.0)
        case 78:
            let driver = try r.u64LittleEndian()
            if driver != 0 { a["driverUniqueId"] = .string(hex(driver, digits: 16, uppercase: true)) }
        case 179: try flag("out1")
        case 180: try flag("out2")
        case 181: number("pdop", Double(try r.u16()) / 10.0)
        case 182: number("hdop", Double(try r.u16()) / 10.0)
        case 199: number("tripOdometer", Double(try r.u32()))
        case 236: alarm(try r.u8() > 0 ? "general" : nil)
        case 239: try flag("ignition")
        case 240: try flag("motion")
        case 241: number("operator", Double(try r.u32()))
        case 253:
            switch try r.u8() {
            case 1: alarm("hardAcceleration")
            case 2: alarm("hardBraking")
            case 3: alarm("hardCornering")
            default: break
            }
        default:
            // readValue: unsigned for 1, 2 and 4 bytes, a signed long for 8.
            let value: Double =
                switch width {
                case 1: Double(try r.u8())
                case 2: Double(try r.u16())
                case 4: Double(try r.u32())
                default: Double(Int64(bitPattern: try r.u64()))
                }
            number("io\(id)", value)
            return
        }
        try r.seek(start + width)
    }

    /// The variable-length section of codec 8 Extended.
    private static func variable(id: Int, _ data: WireReader, _ a: inout [String: AttributeValue]) throws {
        var data = data
        switch id {
        case 256, 325:
            a["vin"] = .string(try data.ascii(data.remaining))
        case 281:
            a["dtcs"] = .string(try data.ascii(data.remaining).replacingOccurrences(of: ",", with: " "))
        case 385:
            _ = try data.u8() // data part
            var index = 1
            while data.remaining > 0 {
                let flags = try data.u8()
                let prefix = "beacon\(index)"
                if flags >> 4 > 0 {
                    a[prefix + "Uuid"] = .string(try data.hexDump(16))
                    a[prefix + "Major"] = .number(Double(try data.u16()))
                    a[prefix + "Minor"] = .number(Double(try data.u16()))
                } else {
                    a[prefix + "Namespace"] = .string(try data.hexDump(10))
                    a[prefix + "Instance"] = .string(try data.hexDump(6))
                }
                a[prefix + "Rssi"] = .number(Double(Int8(bitPattern: try data.u8())))
                if flags & 0x02 != 0 { a[prefix + "Battery"] = .number(Double(try data.u16()) / 100.0) }
                if flags & 0x04 != 0 { a[prefix + "Temp"] = .number(Double(try data.u16())) }
                index += 1
            }
        case 548, 10828, 10829, 10831, 11317:
            _ = try data.u8() // header
            var i = 1
            while data.remaining > 0 {
                var beacon = try data.slice(Int(try data.u8()))
                let prefix = "tag\(i)"
                while beacon.remaining > 0 {
                    let parameter = try beacon.u8()
                    let length = Int(try beacon.u8())
                    switch parameter {
                    case 0: a[prefix + "Rssi"] = .number(Double(Int8(bitPattern: try beacon.u8())))
                    case 1: a[prefix + "Id"] = .string(try beacon.hexDump(length))
                    case 2:
                        var flagged = try beacon.slice(length)
                        let flag = try flagged.u8()
                        if flag & 0x40 != 0 { a[prefix + "LowBattery"] = .bool(true) }
                        if flag & 0x80 != 0 {
                            a[prefix + "Voltage"] = .number(Double(Int(try flagged.u8()) * 10 + 2000))
                        }
                    case 5: a[prefix + "Name"] = .string(String(decoding: try beacon.bytes(length), as: UTF8.self))
                    case 6: a[prefix + "Temp"] = .number(Double(Int16(bitPattern: try beacon.u16())))
                    case 7: a[prefix + "Humidity"] = .number(Double(try beacon.u8()))
                    case 8: a[prefix + "Magnet"] = .bool(try beacon.u8() > 0)
                    case 9: a[prefix + "Motion"] = .bool(try beacon.u8() > 0)
                    case 10: a[prefix + "MotionCount"] = .number(Double(try beacon.u16()))
                    case 11: a[prefix + "Pitch"] = .number(Double(Int8(bitPattern: try beacon.u8())))
                    case 12: a[prefix + "AngleRoll"] = .number(Double(Int16(bitPattern: try beacon.u16())))
                    case 13: a[prefix + "LowBattery"] = .number(Double(try beacon.u8()))
                    case 14: a[prefix + "Battery"] = .number(Double(try beacon.u16()))
                    case 15: a[prefix + "Mac"] = .string(try beacon.hexDump(6))
                    default: try beacon.skip(length)
                    }
                }
                i += 1
            }
        default:
            a["io\(id)"] = .string(try data.hexDump(data.remaining))
        }
    }

    /// Java's `String.format("%016X", long)` and Netty's lowercase `ByteBufUtil.hexDump`.
    static func hex(_ value: UInt64, digits: Int, uppercase: Bool) -> String {
        let text = String(value, radix: 16, uppercase: uppercase)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}

/// A bounds-checked big-endian reader over one frame: reading past the end throws,
/// as Netty's `ByteBuf` does.
struct WireReader {
    struct Overrun: Error {}

    private let storage: [UInt8]
    private(set) var index: Int
    private let end: Int

    init(_ bytes: [UInt8]) {
        self.init(bytes, start: 0, end: bytes.count)
    }

    private init(_ bytes: [UInt8], start: Int, end: Int) {
        storage = bytes
        index = start
        self.end = end
    }

    var remaining: Int { end - index }

    private mutating func take(_ count: Int) throws -> Range<Int> {
        guard count >= 0, count <= remaining else { throw Overrun() }
        defer { index += count }
        return index..<(index + count)
    }

    private mutating func bigEndian(_ count: Int) throws -> UInt64 {
        try take(count).reduce(0) { $0 << 8 | UInt64(storage[$1]) }
    }

    mutating func u8() throws -> UInt8 { UInt8(try bigEndian(1)) }
    mutating func u16() throws -> UInt16 { UInt16(try bigEndian(2)) }
    mutating func u32() throws -> UInt32 { UInt32(try bigEndian(4)) }
    mutating func u64() throws -> UInt64 { try bigEndian(8) }
    mutating func u64LittleEndian() throws -> UInt64 {
        try take(8).reversed().reduce(0) { $0 << 8 | UInt64(storage[$1]) }
    }
    mutating func skip(_ count: Int) throws { _ = try take(count) }
    mutating func bytes(_ count: Int) throws -> ArraySlice<UInt8> { storage[try take(count)] }

    /// Netty's `readerIndex(int)`: past the end throws.
    mutating func seek(_ position: Int) throws {
        guard position <= end else { throw Overrun() }
        index = position
    }

    /// Netty's `readSlice`: a reader over the next `count` bytes, which this one skips.
    mutating func slice(_ count: Int) throws -> WireReader {
        let range = try take(count)
        return WireReader(storage, start: range.lowerBound, end: range.upperBound)
    }

    /// US-ASCII as Java decodes it: a byte above 0x7F becomes U+FFFD.
    mutating func ascii(_ count: Int) throws -> String {
        String(String.UnicodeScalarView(try bytes(count).map { $0 < 0x80 ? Unicode.Scalar($0) : "\u{FFFD}" }))
    }

    mutating func hexDump(_ count: Int) throws -> String {
        try bytes(count).map { FakeTeltonikaServer.hex(UInt64($0), digits: 2, uppercase: false) }.joined()
    }
}

extension FakeTeltonikaServer.Stored: TraccarStoredPosition {}

extension FakeTeltonikaServer: ArrivalLog {
    package var arrivals: [Stored] { positions }
}

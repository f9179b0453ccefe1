/// Appends JSON pieces to a byte buffer, for encoders on a hot path.
package enum JSONBytes {
    /// The string's characters, escaped, without the surrounding quotes.
    package static func appendQuotedBody(_ text: String, to out: inout [UInt8]) {
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
    }

    /// A number as `JSONValue.format(number:)` writes it: integers without a fraction.
    package static func appendNumber(_ value: Double, to out: inout [UInt8]) {
        if value == value.rounded(), abs(value) < 1e15 {
            appendInteger(Int64(value), to: &out)
        } else {
            out.append(contentsOf: value.description.utf8)
        }
    }

    package static func appendInteger(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            for index in stride(from: count - 1, through: 0, by: -1) { out.append(buffer[index]) }
        }
    }

    /// `2026-07-25T04:30:00.000Z`, as `Timestamp.iso8601(milliseconds:)` writes it.
    package static func appendISO8601(milliseconds ms: Int64, to out: inout [UInt8]) {
        let seconds = ms >= 0 ? ms / 1000 : (ms - 999) / 1000
        let millis = Int(ms - seconds * 1000)
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let secondOfDay = Int(seconds - days * 86400)
        let (year, month, day) = Timestamp.civilFromDays(Int(days))
        func two(_ v: Int) {
            out.append(UInt8(ascii: "0") + UInt8(v / 10))
            out.append(UInt8(ascii: "0") + UInt8(v % 10))
        }
        two(year / 100)
        two(year % 100)
        out.append(UInt8(ascii: "-"))
        two(month)
        out.append(UInt8(ascii: "-"))
        two(day)
        out.append(UInt8(ascii: "T"))
        two(secondOfDay / 3600)
        out.append(UInt8(ascii: ":"))
        two(secondOfDay / 60 % 60)
        out.append(UInt8(ascii: ":"))
        two(secondOfDay % 60)
        out.append(UInt8(ascii: "."))
        out.append(UInt8(ascii: "0") + UInt8(millis / 100))
        two(millis % 100)
        out.append(UInt8(ascii: "Z"))
    }
}

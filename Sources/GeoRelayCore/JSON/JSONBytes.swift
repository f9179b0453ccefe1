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
                out.append(contentsOf: [
                    UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)],
                    hex[Int(byte & 0xF)],
                ])
            default: out.append(byte)
            }
        }
    }

    /// A number as `JSONValue.format(number:)` writes it: integers without a fraction.
    package static func appendNumber(_ value: Double, to out: inout [UInt8]) {
        if value == value.rounded(), abs(value) < 1e15 {
            appendInteger(Int64(value), to: &out)
        } else {
            out.append(contentsOf: (value.isFinite ? value.description : "null").utf8)
        }
    }

    private static let powersOfTen: [Int64] = [
        1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000,
    ]

    /// A number rounded to `decimals` places, trailing zeros dropped (`12.50` → `12.5`,
    /// `3.000` → `3`). Faster than the shortest round-trip form, and shorter on
    /// the wire for values that came through a unit conversion.
    package static func appendFixed(_ value: Double, decimals: Int, to out: inout [UInt8]) {
        let scale = powersOfTen[min(max(decimals, 0), powersOfTen.count - 1)]
        let scaled = (value * Double(scale)).rounded()
        guard scaled.isFinite, abs(scaled) < 9e15 else {
            // JSON has no NaN or infinity; bounds keep them out of the spool, this keeps them out of a body.
            out.append(contentsOf: (value.isFinite ? value.description : "null").utf8)
            return
        }
        var units = Int64(scaled)
        if units < 0 {
            out.append(UInt8(ascii: "-"))
            units = -units
        }
        appendInteger(units / scale, to: &out)
        var fraction = units % scale
        guard fraction != 0 else { return }
        var places = decimals
        while fraction % 10 == 0 {
            fraction /= 10
            places -= 1
        }
        out.append(UInt8(ascii: "."))
        // Leading zeros of the fraction, then its digits written from the right in place.
        let start = out.count
        for _ in 0..<places { out.append(UInt8(ascii: "0")) }
        var index = start + places - 1
        while fraction > 0 {
            out[index] = UInt8(ascii: "0") + UInt8(fraction % 10)
            fraction /= 10
            index -= 1
        }
    }

    package static func appendInteger(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits:
            (
                UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8
            ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
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
    ///
    /// Years 0000 to 9999 only: a time outside them (which ingest refuses, but an older spool may
    /// hold) is written as the nearest end rather than overflowing a digit.
    package static func appendISO8601(milliseconds unbounded: Int64, to out: inout [UInt8]) {
        let ms = min(max(unbounded, Timestamp.earliestMs), PositionBounds.latestTimeMs)
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

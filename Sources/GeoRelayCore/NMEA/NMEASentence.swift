/// One NMEA 0183 sentence, checked and split into fields.
package struct NMEASentence: Sendable, Equatable {
    /// `GP`, `GN`, `GL`, `GA`, `GB`, `BD`, …
    package var talker: String
    /// `RMC`, `GGA`, `ZDA`, `GSV`, …
    package var type: String
    /// The fields after the address, checksum removed.
    package var fields: [Substring]

    /// Parses a sentence. A line may carry stray bytes before its `$` (binary
    /// frames interleaved by the receiver); a checksum, when present, must match.
    package static func parse(_ line: String) throws(IngestError) -> NMEASentence {
        guard let dollar = line.firstIndex(where: { $0 == "$" }) else { throw .parse("not an NMEA sentence") }
        var body = line[line.index(after: dollar)...]
        while let last = body.last, last == "\r" || last == "\n" || last == " " { body = body.dropLast() }
        guard body.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw .parse("NMEA sentence with non-printable bytes")
        }
        if let star = body.lastIndex(of: "*") {
            let given = body[body.index(after: star)...]
            let data = body[..<star]
            guard given.count == 2, let expected = UInt8(given, radix: 16) else {
                throw .checksum("malformed checksum \"*\(given.prefix(4))\"")
            }
            let actual = data.utf8.reduce(UInt8(0)) { $0 ^ $1 }
            guard actual == expected else {
                throw .checksum(
                    "checksum *\(given) does not match the sentence (computed \(String(actual, radix: 16, uppercase: true)))"
                )
            }
            body = data
        }
        var fields = body.split(separator: ",", omittingEmptySubsequences: false)
        guard let address = fields.first, address.count == 5 || (address.first == "P" && address.count >= 4),
            address.allSatisfy({ $0.isLetter || $0.isNumber })
        else {
            throw .parse("NMEA address \"\(fields.first?.prefix(8) ?? "")\" is not a talker and sentence type")
        }
        fields.removeFirst()
        if address.first == "P" { return NMEASentence(talker: "P", type: String(address.dropFirst()), fields: fields) }
        return NMEASentence(talker: String(address.prefix(2)), type: String(address.dropFirst(2)), fields: fields)
    }

    package func field(_ index: Int) -> Substring? {
        guard index < fields.count, !fields[index].isEmpty else { return nil }
        return fields[index]
    }

    /// `hhmmss[.sss]` as milliseconds since midnight.
    package func timeOfDayMs(_ index: Int) -> Int64? {
        guard let text = field(index), text.count >= 6 else { return nil }
        let digits = Array(text.utf8)
        func two(_ at: Int) -> Int64? {
            guard digits[at] >= 48, digits[at] <= 57, digits[at + 1] >= 48, digits[at + 1] <= 57 else { return nil }
            return Int64(digits[at] - 48) * 10 + Int64(digits[at + 1] - 48)
        }
        guard let h = two(0), let m = two(2), let s = two(4), h < 24, m < 60, s < 61 else { return nil }
        var ms: Int64 = 0
        if digits.count > 6 {
            // Digits only, read as milliseconds here: `Double(".5e17")` would take an exponent
            // (found by a hostile line: `000000.5e17` overflowed the conversion to milliseconds).
            guard digits[6] == UInt8(ascii: "."), digits.count > 7, digits.count <= 16,
                digits[7...].allSatisfy({ $0 >= 48 && $0 <= 57 })
            else { return nil }
            var scale: Int64 = 100
            var fraction: Int64 = 0
            for digit in digits[7...] {
                fraction += Int64(digit - 48) * scale
                scale /= 10
            }
            // The first dropped digit rounds, as the receiver's own rounding would.
            if digits.count > 10, digits[10] >= 53 { fraction += 1 }
            ms = fraction
        }
        return ((h * 60 + m) * 60 + s) * 1000 + ms
    }

    /// `ddmm.mmmm` + `N`/`S` (or `dddmm.mmmm` + `E`/`W`) as signed degrees.
    package func coordinate(_ index: Int, degreeDigits: Int) -> Double? {
        guard let text = field(index), let hemisphere = field(index + 1), text.count > degreeDigits + 1,
            let degrees = Double(text.prefix(degreeDigits)), let minutes = Double(text.dropFirst(degreeDigits)),
            minutes >= 0, minutes < 60, degrees >= 0
        else { return nil }
        let value = degrees + minutes / 60
        switch hemisphere {
        case "N", "E": return value
        case "S", "W": return -value
        default: return nil
        }
    }

    package func number(_ index: Int) -> Double? {
        field(index).flatMap { Double($0) }
    }
}

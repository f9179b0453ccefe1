/// Parsing and formatting of fix times.
///
/// Collectors send ISO 8601 with a zone or a number of Unix seconds or
/// milliseconds. Foundation's ISO8601DateFormatter is slow and strict about
/// fractions, and the ingest path parses every line, so this is done by hand.
package enum Timestamp {
    /// Numbers at or above this are milliseconds: 1e11 seconds is the year 5138,
    /// 1e11 milliseconds is 1973, so no real fix is ambiguous.
    static let millisecondThreshold: Double = 1e11

    /// Milliseconds since the epoch from a Unix time in seconds or milliseconds.
    package static func milliseconds(fromUnix value: Double) -> Int64? {
        guard value.isFinite, value >= 0 else { return nil }
        let ms = value >= millisecondThreshold ? value : value * 1000
        guard ms < 1e15 else { return nil }
        return Int64(ms.rounded())
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff][Z|±HH:MM|±HHMM]`; a zone is required,
    /// since a zoneless time on a vessel crossing time zones means nothing.
    package static func milliseconds(fromISO8601 text: String) -> Int64? {
        let b = Array(text.utf8)
        func digits(_ at: Int, _ count: Int) -> Int? {
            guard at + count <= b.count else { return nil }
            var v = 0
            for i in at..<(at + count) {
                let c = b[i]
                guard c >= 48, c <= 57 else { return nil }
                v = v * 10 + Int(c - 48)
            }
            return v
        }
        guard b.count >= 20,
            let year = digits(0, 4), b[4] == UInt8(ascii: "-"),
            let month = digits(5, 2), b[7] == UInt8(ascii: "-"),
            let day = digits(8, 2),
            b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: "t") || b[10] == UInt8(ascii: " "),
            let hour = digits(11, 2), b[13] == UInt8(ascii: ":"),
            let minute = digits(14, 2), b[16] == UInt8(ascii: ":"),
            let second = digits(17, 2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
            hour < 24, minute < 60, second < 61
        else { return nil }
        var i = 19
        var fractionMs = 0.0
        if i < b.count, b[i] == UInt8(ascii: ".") || b[i] == UInt8(ascii: ",") {
            i += 1
            var scale = 100.0
            let start = i
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                fractionMs += Double(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
            guard i > start else { return nil }
        }
        guard i < b.count else { return nil }
        var offsetMinutes = 0
        if b[i] == UInt8(ascii: "Z") || b[i] == UInt8(ascii: "z") {
            i += 1
        } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
            guard let oh = digits(i + 1, 2) else { return nil }
            var j = i + 3
            if j < b.count, b[j] == UInt8(ascii: ":") { j += 1 }
            guard let om = digits(j, 2), oh < 24, om < 60 else { return nil }
            offsetMinutes = sign * (oh * 60 + om)
            i = j + 2
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = Int64(days) * 86400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetMinutes * 60)
        return seconds * 1000 + Int64(fractionMs.rounded())
    }

    /// `2026-07-25T04:30:00.000Z`: UTC with milliseconds, the push endpoint's form.
    ///
    /// Years 0000 to 9999 only: a time outside them (which ingest refuses, but an older spool may
    /// hold) is written as the nearest end rather than overflowing (`Int64.min` trapped here).
    package static func iso8601(milliseconds unbounded: Int64) -> String {
        let ms = min(max(unbounded, earliestMs), PositionBounds.latestTimeMs)
        let seconds = floorDiv(ms, 1000)
        let millis = Int(ms - seconds * 1000)
        let days = floorDiv(seconds, 86400)
        let secondOfDay = Int(seconds - days * 86400)
        let (y, m, d) = civilFromDays(Int(days))
        func pad(_ v: Int, _ n: Int) -> String {
            let s = String(v)
            return s.count >= n ? s : String(repeating: "0", count: n - s.count) + s
        }
        return
            "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2)).\(pad(millis, 3))Z"
    }

    /// 0000-01-01T00:00:00Z, the first instant a four-digit year writes.
    package static let earliestMs: Int64 = -62_167_219_200_000

    private static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        a >= 0 ? a / b : -((-a + b - 1) / b)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    package static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    package static func civilFromDays(_ z0: Int) -> (year: Int, month: Int, day: Int) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}

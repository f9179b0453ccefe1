/// One receiver's sentences, as the integrity watch reads them: one `GNSSSample` per fix cycle,
/// with the sky its `GSV` sets describe. Kept beside the fix assembler, which throws the sky away;
/// it turns nothing into a position and answers no line.
///
/// A cycle ends at the receiver's `RMC`, or at its `GGA` if it sends no `RMC`. Every number is
/// range-checked before use: `Double("nan")` parses.
package struct ReceiverWatch: Sendable {
    package let source: String
    /// Per talker (`GP`, `GL`, `GA`, `GB`…), the set being read and the last complete one.
    private var partial: [String: (total: Int, next: Int, cn0: [Double], inView: Int)] = [:]
    private var complete: [String: (cn0: [Double], inView: Int, atMs: Int64)] = [:]
    private var used: Int?
    private var hdop: Double?
    private var sendsRMC = false
    /// The date of the last valid `RMC` or `ZDA`: a `GGA`-only receiver's fix takes it.
    private var dayMs: Int64?

    /// A talker's set older than this is no longer the sky (the receiver stopped sending it).
    static let skyLifetimeMs: Int64 = 5_000

    package init(source: String) {
        self.source = source
    }

    /// Reads one sentence received at `atMs` on the monotonic clock; a cycle's end gives a sample.
    package mutating func feed(_ sentence: NMEASentence, atMs: Int64) -> GNSSSample? {
        switch sentence.type {
        case "GSV":
            gsv(sentence, atMs: atMs)
            return nil
        case "GGA":
            used = Self.bounded(sentence.number(6), 0...255).map { Int($0) }
            hdop = Self.bounded(sentence.number(7), 0...99.99)
            guard !sendsRMC else { return nil }
            let quality = Self.bounded(sentence.number(5), 0...9) ?? 0
            guard quality > 0, let time = sentence.timeOfDayMs(0), let dayMs,
                let fix = Self.fix(sentence, latAt: 1, timeMs: dayMs + time)
            else { return sample(fix: nil, atMs: atMs) }
            return sample(fix: fix, atMs: atMs)
        case "RMC":
            sendsRMC = true
            guard sentence.field(1) == "A", let time = sentence.timeOfDayMs(0) else {
                return sample(fix: nil, atMs: atMs)
            }
            if let date = Self.date(sentence.field(8)) { dayMs = date }
            guard let dayMs, var fix = Self.fix(sentence, latAt: 2, timeMs: dayMs + time) else {
                return sample(fix: nil, atMs: atMs)
            }
            fix.speed = Self.bounded(sentence.number(6), 0...10_000).map { $0 * OsmAndQuery.metresPerSecondPerKnot }
            fix.course = Self.bounded(sentence.number(7), 0...360)
            return sample(fix: fix, atMs: atMs)
        case "ZDA":
            if let day = Self.bounded(sentence.number(1), 1...31), let month = Self.bounded(sentence.number(2), 1...12),
                let year = Self.bounded(sentence.number(3), 1980...9999)
            {
                dayMs = Int64(Timestamp.daysFromCivil(year: Int(year), month: Int(month), day: Int(day))) * 86_400_000
            }
            return nil
        default:
            return nil
        }
    }

    private func sample(fix: GNSSSample.Fix?, atMs: Int64) -> GNSSSample {
        var cn0: [Double] = []
        var inView = 0
        var heard = false
        for set in complete.values where atMs - set.atMs <= Self.skyLifetimeMs {
            cn0 += set.cn0
            inView += set.inView
            heard = true
        }
        let sky = heard ? GNSSSample.Sky(cn0: cn0, inView: inView, used: used, hdop: hdop) : nil
        return GNSSSample(source: source, atMs: atMs, fix: fix, sky: sky)
    }

    /// `$xxGSV,total,number,inView,{prn,elevation,azimuth,snr}×1…4`: a set is the sky once its last
    /// sentence arrives in order; one out of order starts again.
    private mutating func gsv(_ s: NMEASentence, atMs: Int64) {
        guard let total = Self.bounded(s.number(0), 1...9).map({ Int($0) }),
            let number = Self.bounded(s.number(1), 1...9).map({ Int($0) }),
            let inView = Self.bounded(s.number(2), 0...255).map({ Int($0) })
        else { return }
        let begun = number == 1 ? (total: total, next: 1, cn0: [Double](), inView: inView) : partial[s.talker]
        guard var set = begun, set.next == number, set.total == total else {
            partial[s.talker] = nil
            return
        }
        // Up to four satellites a sentence; a trailing signal id (NMEA 4.1) makes the count odd.
        for snrIndex in stride(from: 6, through: 18, by: 4) where snrIndex < s.fields.count {
            if let snr = Self.bounded(s.number(snrIndex), 1...99) { set.cn0.append(snr) }
        }
        set.next += 1
        if number == total {
            complete[s.talker] = (set.cn0, set.inView, atMs)
            partial[s.talker] = nil
        } else {
            partial[s.talker] = set
        }
    }

    private static func fix(_ s: NMEASentence, latAt index: Int, timeMs: Int64) -> GNSSSample.Fix? {
        guard let lat = s.coordinate(index, degreeDigits: 2), let lon = s.coordinate(index + 2, degreeDigits: 3),
            abs(lat) <= 90, abs(lon) <= 180
        else { return nil }
        return GNSSSample.Fix(timeMs: timeMs, lat: lat, lon: lon)
    }

    /// `ddmmyy` as ms since the epoch.
    private static func date(_ field: Substring?) -> Int64? {
        guard let field, field.count == 6, let dd = Int(field.prefix(2)), let mm = Int(field.dropFirst(2).prefix(2)),
            let yy = Int(field.suffix(2)), (1...31).contains(dd), (1...12).contains(mm), (0...99).contains(yy)
        else { return nil }
        return Int64(Timestamp.daysFromCivil(year: yy < 80 ? 2000 + yy : 1900 + yy, month: mm, day: dd)) * 86_400_000
    }

    private static func bounded(_ value: Double?, _ range: ClosedRange<Double>) -> Double? {
        guard let value, value.isFinite, range.contains(value) else { return nil }
        return value
    }
}

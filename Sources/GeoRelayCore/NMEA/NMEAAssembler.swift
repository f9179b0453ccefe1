/// Turns one connection's NMEA sentences into positions: one per fix cycle.
///
/// A receiver reports each fix in several sentences: RMC (date, speed,
/// course) and GGA (altitude, HDOP, fix quality) with the same time. They are
/// merged into one position. A cycle completes when both have arrived (for a
/// source known to send both), when a sentence of another time starts the
/// next cycle, or when the connection goes quiet; the lines that make up a
/// position all get its `ok`. GGA has no date: it takes the date of the last
/// valid RMC or ZDA, and a GGA before any date is skipped. A fix is only taken
/// from RMC status `A` or GGA quality above 0, so nothing a receiver does not
/// vouch for becomes a position.
package struct NMEAAssembler: Sendable {
    /// What to do with the line just fed, and with lines held before it.
    package enum Action: Sendable, Equatable {
        /// The cycle held so far is done: store this position and answer the held lines with it.
        case flush(Position)
        /// This line belongs to a cycle not complete yet: its answer waits.
        case hold
        /// This line completes the held cycle: store the position and answer the held lines and this one.
        case complete(Position)
        case skip(String)
    }

    private struct Pending: Sendable {
        var timeOfDayMs: Int64
        var dayMs: Int64?
        var lat: Double
        var lon: Double
        var speed: Double?
        var course: Double?
        var altitude: Double?
        var hdop: Double?
        var hasRMC = false
        var hasGGA = false
    }

    /// Days since the epoch, in ms, of the last valid date, and the time of day it came with.
    private var dateMs: Int64?
    private var dateTimeOfDayMs: Int64 = 0
    private var pending: Pending?
    private var sendsRMC = false
    private var sendsGGA = false
    /// Whether a whole cycle has been seen, so which sentences make up one is known.
    private var learned = false
    /// The time of day of the last position given out, so a late part of it is not a second position.
    private var lastEmittedTimeOfDayMs: Int64?
    /// Metres of accuracy per unit of HDOP, when configured (a receiver's UERE).
    package var accuracyPerHDOP: Double?

    package init(accuracyPerHDOP: Double? = nil) {
        self.accuracyPerHDOP = accuracyPerHDOP
    }

    package var hasPending: Bool { pending != nil }

    /// Feeds one sentence; `device` is the connection's device.
    package mutating func feed(_ sentence: NMEASentence, device: String) -> [Action] {
        switch sentence.type {
        case "RMC": return rmc(sentence, device: device)
        case "GGA": return gga(sentence, device: device)
        case "ZDA":
            if let time = sentence.timeOfDayMs(0), let day = sentence.number(1), let month = sentence.number(2),
                let year = sentence.number(3),
                (1...31).contains(day), (1...12).contains(month), (1980...9999).contains(year)
            {
                // The year is bounded before it becomes an Int: found by the fuzzer (a 10-digit year overflowed).
                dateMs = Int64(Timestamp.daysFromCivil(year: Int(year), month: Int(month), day: Int(day))) * 86_400_000
                dateTimeOfDayMs = time
            }
            return [.skip("ZDA")]
        default:
            return [.skip(sentence.talker == "P" ? "proprietary" : sentence.type)]
        }
    }

    /// Ends a cycle that will not be completed (the connection closed or went quiet).
    package mutating func flush(device: String) -> Position? {
        defer { pending = nil }
        return pending.flatMap { emit($0, device: device) }
    }

    private mutating func rmc(_ s: NMEASentence, device: String) -> [Action] {
        sendsRMC = true
        guard let time = s.timeOfDayMs(0) else { return [.skip("no-time")] }
        if time == lastEmittedTimeOfDayMs, pending == nil { return [.skip("same-fix")] }
        let actions = startCycle(at: time, device: device)
        guard s.field(1) == "A", let lat = s.coordinate(2, degreeDigits: 2), let lon = s.coordinate(4, degreeDigits: 3),
            abs(lat) <= 90, abs(lon) <= 180
        else {
            // A void RMC cannot add to a cycle, but it does end one waiting for it.
            if let held = pending, held.timeOfDayMs == time, held.hasGGA, let position = emit(held, device: device) {
                pending = nil
                return actions + [.complete(position)]
            }
            return actions + [.skip("no-fix")]
        }
        var day: Int64?
        if let date = s.field(8), date.count == 6, let dd = Int(date.prefix(2)),
            let mm = Int(date.dropFirst(2).prefix(2)), let yy = Int(date.suffix(2)),
            (1...31).contains(dd), (1...12).contains(mm)
        {
            day = Int64(Timestamp.daysFromCivil(year: yy < 80 ? 2000 + yy : 1900 + yy, month: mm, day: dd)) * 86_400_000
            dateMs = day
            dateTimeOfDayMs = time
        }
        var fix = pending ?? Pending(timeOfDayMs: time, lat: lat, lon: lon)
        fix.lat = lat
        fix.lon = lon
        fix.dayMs = day ?? fix.dayMs ?? currentDay(for: time)
        fix.speed = s.number(6).map { $0 * OsmAndQuery.metresPerSecondPerKnot }
        fix.course = s.number(7)
        fix.hasRMC = true
        return actions + settle(fix, device: device)
    }

    private mutating func gga(_ s: NMEASentence, device: String) -> [Action] {
        sendsGGA = true
        guard let time = s.timeOfDayMs(0) else { return [.skip("no-time")] }
        if time == lastEmittedTimeOfDayMs, pending == nil { return [.skip("same-fix")] }
        let actions = startCycle(at: time, device: device)
        guard let quality = s.number(5), quality > 0, let lat = s.coordinate(1, degreeDigits: 2),
            let lon = s.coordinate(3, degreeDigits: 3),
            abs(lat) <= 90, abs(lon) <= 180
        else {
            if let held = pending, held.timeOfDayMs == time, held.hasRMC, let position = emit(held, device: device) {
                pending = nil
                return actions + [.complete(position)]
            }
            return actions + [.skip("no-fix")]
        }
        var fix = pending ?? Pending(timeOfDayMs: time, lat: lat, lon: lon)
        if !fix.hasRMC {
            // RMC's coordinates win when both are there; GGA's otherwise.
            fix.lat = lat
            fix.lon = lon
        }
        fix.dayMs = fix.dayMs ?? currentDay(for: time)
        guard fix.dayMs != nil else {
            pending = nil
            return actions + [.skip("no-date")]
        }
        fix.altitude = s.number(8)
        fix.hdop = s.number(7)
        fix.hasGGA = true
        return actions + settle(fix, device: device)
    }

    /// A sentence of another time ends the held cycle.
    private mutating func startCycle(at time: Int64, device: String) -> [Action] {
        guard let held = pending, held.timeOfDayMs != time else { return [] }
        pending = nil
        learned = true
        return emit(held, device: device).map { [.flush($0)] } ?? []
    }

    private mutating func emit(_ fix: Pending, device: String) -> Position? {
        let position = position(from: fix, device: device)
        if position != nil { lastEmittedTimeOfDayMs = fix.timeOfDayMs }
        return position
    }

    /// Completes the cycle if nothing more is expected for it; holds it otherwise.
    private mutating func settle(_ fix: Pending, device: String) -> [Action] {
        guard fix.dayMs != nil else {
            pending = nil
            return [.skip("no-date")]
        }
        // Until one whole cycle has gone by, it is not known which sentences make one up.
        let complete = learned && (fix.hasRMC || !sendsRMC) && (fix.hasGGA || !sendsGGA)
        if complete, let position = emit(fix, device: device) {
            pending = nil
            return [.complete(position)]
        }
        pending = fix
        return [.hold]
    }

    /// The day a time of day belongs to, from the last date seen (rolling over at midnight).
    private func currentDay(for time: Int64) -> Int64? {
        guard let dateMs else { return nil }
        // A time of day well before the one the date came with is the next day.
        return time + 3_600_000 < dateTimeOfDayMs ? dateMs + 86_400_000 : dateMs
    }

    private func position(from fix: Pending, device: String) -> Position? {
        guard let day = fix.dayMs else { return nil }
        var position = Position(
            device: device, timeMs: day + fix.timeOfDayMs, lat: fix.lat, lon: fix.lon,
            speed: fix.speed, course: fix.course, altitude: fix.altitude)
        if let hdop = fix.hdop {
            position.attributes.append(Attribute("hdop", .number(hdop)))
            if let factor = accuracyPerHDOP { position.accuracy = hdop * factor }
        }
        return position
    }
}

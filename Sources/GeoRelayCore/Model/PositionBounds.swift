/// The physical bounds of every field of a ``Position``, checked in two places.
///
/// At the door (`LineDecoder.validate`, for every position ingest is about to store,
/// whatever form or door it came through) a value outside them is an `err range` or
/// `err time` that names the field, never a stored value. Before an encoder (the
/// forwarders' plan, `problem(in:)`) a stored position outside them, written by an
/// older version or by a bug, is quarantined with the reason instead of being sent,
/// so one bad row can never crash-loop the relay or wedge its device.
///
/// The bounds are wide: they refuse what no receiver on Earth reports, not what is
/// unusual.
///
/// | Field      | Bounds                                         | Why |
/// |------------|------------------------------------------------|-----|
/// | `lat`      | −90…90°                                        | the globe |
/// | `lon`      | −180…180°                                      | the globe |
/// | time       | 1970-01-01 … 9999-12-31T23:59:59.999Z          | what ISO 8601 and every server's date type can hold (and not more than `maxFutureSeconds` ahead of a set clock) |
/// | `speed`    | 0…1,000 m/s (3,600 km/h)                       | twice the GPS export limit (1,000 kn), past which receivers stop reporting |
/// | `course`   | −360…720°, stored folded into 0…<360           | one turn either side of the circle is a sign or offset slip; more is not a course |
/// | `altitude` | −12,000…100,000 m                              | the deepest trench to the edge of space |
/// | `accuracy` | 0…1,000,000 m                                  | a cell-tower guess is kilometres; a thousand km is no fix |
/// | `battery`  | 0…100 %                                        | a level |
/// | `hdop`     | 0…100                                          | NMEA writes at most 99.9 |
/// | `odometer` | 0…10¹² m                                       | a billion km; a field or an attribute of that name |
/// | attribute numbers | finite, magnitude < 10¹⁵                | exact as an integer in a Double, and every encoder writes them as numbers |
///
/// Every value must be finite; NaN and infinities are refused everywhere.
package enum PositionBounds {
    package static let speed: ClosedRange<Double> = 0...1_000
    package static let course: ClosedRange<Double> = -360...720
    package static let altitude: ClosedRange<Double> = -12_000...100_000
    package static let accuracy: ClosedRange<Double> = 0...1_000_000
    package static let battery: ClosedRange<Double> = 0...100
    package static let hdop: ClosedRange<Double> = 0...100
    package static let odometer: ClosedRange<Double> = 0...1e12
    /// 9999-12-31T23:59:59.999Z, the last instant a four-digit year writes.
    package static let latestTimeMs: Int64 = 253_402_300_799_999
    package static let timeMs: ClosedRange<Int64> = 0...latestTimeMs
    /// Attribute numbers: exact integers in a Double, and never written in exponent form.
    package static let attributeMagnitude: Double = 1e15

    /// `course` folded into 0…<360 when it is within `course`; nil when it is not.
    package static func folded(course: Double) -> Double? {
        guard course.isFinite, Self.course.contains(course) else { return nil }
        var folded = course.truncatingRemainder(dividingBy: 360)
        if folded < 0 { folded += 360 }
        // -0.0 and a remainder that rounds up to 360 both mean north.
        return folded >= 360 || folded == 0 ? 0 : folded
    }

    /// The first field of `position` outside its bounds, as `err range`/`err time` would
    /// name it; nil when every field is within them. The course is checked unfolded.
    package static func problem(in position: Position) -> IngestError? {
        guard position.lat.isFinite, (-90...90).contains(position.lat) else {
            return .range("lat \(describe(position.lat)) outside -90...90")
        }
        guard position.lon.isFinite, (-180...180).contains(position.lon) else {
            return .range("lon \(describe(position.lon)) outside -180...180")
        }
        guard timeMs.contains(position.timeMs) else {
            return .time(position.timeMs < 0 ? "fix time before 1970" : "fix time after the year 9999")
        }
        // One call a field, no array: this runs for every position ingest stores.
        if let value = position.speed, let problem = check("speed", value, speed) { return problem }
        if let value = position.course, let problem = check("course", value, course) { return problem }
        if let value = position.altitude, let problem = check("alt", value, altitude) { return problem }
        if let value = position.accuracy, let problem = check("accuracy", value, accuracy) { return problem }
        if let value = position.battery, let problem = check("batt", value, battery) { return problem }
        if let value = position.odometer, let problem = check("odometer", value, odometer) { return problem }
        for attribute in position.attributes {
            if let problem = problem(in: attribute) { return problem }
        }
        return nil
    }

    /// An attribute the encoders cannot carry: a non-finite or huge number, an `hdop` out
    /// of bounds, a name with a control character.
    package static func problem(in attribute: Attribute) -> IngestError? {
        if ControlEscaping.containsControl(attribute.key) {
            return .parse(
                "attribute \"\(ControlEscaping.escape(String(attribute.key.prefix(40))))\": a name may not hold control characters"
            )
        }
        guard case .number(let n) = attribute.value else {
            // A source's own odometer is stored as the position's (`Odometer`): metres or nothing.
            return attribute.key == "odometer"
                ? .range(
                    "odometer \"\(ControlEscaping.escape(String(attribute.value.text.prefix(40))))\" is not a number of metres"
                ) : nil
        }
        if attribute.key == "hdop" { return check("hdop", n, hdop) }
        if attribute.key == "odometer" { return check("odometer", n, odometer) }
        guard n.isFinite, abs(n) < attributeMagnitude else {
            return .range(
                "\(ControlEscaping.escape(String(attribute.key.prefix(40)))) \(describe(n)) is not a finite number below 1e15"
            )
        }
        return nil
    }

    private static func check(_ name: String, _ value: Double, _ bounds: ClosedRange<Double>) -> IngestError? {
        guard value.isFinite else { return .range("\(name) is not a finite number") }
        guard bounds.contains(value) else {
            return .range(
                "\(name) \(describe(value)) outside \(describe(bounds.lowerBound))...\(describe(bounds.upperBound))")
        }
        return nil
    }

    /// A number as the error names it: whole numbers without a fraction, others as Swift prints them.
    private static func describe(_ value: Double) -> String {
        value.isFinite ? JSONValue.format(number: value) : "\(value)"
    }
}

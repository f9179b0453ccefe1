/// `SBDMessage` to bytes and back (the layout is in its comment).
extension SBDMessage {
    /// 1e-5° a step: about 1.1 m of latitude.
    static let placeScale = 100_000.0
    static let latitudeSteps: UInt64 = 18_000_000
    static let longitudeSteps: UInt64 = 36_000_000
    static let unknownSpeed: UInt16 = 127
    static let unknownCourse: UInt16 = 511
    /// As many as the largest message could hold (6 bytes the least a fix takes).
    package static let maximumFixes = 56

    private enum Head {
        static let unit: UInt8 = 0x1F
        static let alarm: UInt8 = 0x20
        static let relative: UInt8 = 0x40
        static let motion: UInt8 = 0x80
    }

    /// The message's bytes.
    /// - Throws: a fix the form cannot carry (a unit beyond 31, a place out of range, a time before
    ///   2024 or after 2160, an unknown alarm name), named by its place in `fixes`.
    package func encode() throws(SBDMessageError) -> [UInt8] {
        guard (1...Self.maximumFixes).contains(fixes.count) else {
            throw SBDMessageError("an SBD message carries 1 to \(Self.maximumFixes) fixes, not \(fixes.count)")
        }
        let base = fixes.map(\.timeSeconds).max()!
        guard base >= Self.epochSeconds, base - Self.epochSeconds <= Int64(UInt32.max) else {
            throw SBDMessageError("fix time \(base) s is outside 2024–2160, which an SBD message carries")
        }
        var out: [UInt8] = [Self.version]
        Self.appendVarint(UInt64(relayID), to: &out)
        Self.appendVarint(UInt64(sequence), to: &out)
        out.append(roster)
        out.append(UInt8(fixes.count))
        Self.appendBigEndian(UInt64(base - Self.epochSeconds), bytes: 4, to: &out)
        var previous: (lat: Int64, lon: Int64)?
        for (index, fix) in fixes.enumerated() {
            let place = try Self.quantised(fix, index: index)
            guard fix.timeSeconds >= Self.epochSeconds else {
                throw SBDMessageError(
                    "fix \(index): time \(fix.timeSeconds) s is before 2024, which an SBD message carries")
            }
            guard (0..<Self.maximumUnits).contains(fix.unit) else {
                throw SBDMessageError("fix \(index): unit \(fix.unit) is not 0–\(Self.maximumUnits - 1)")
            }
            var head = UInt8(fix.unit)
            var body: [UInt8] = []
            Self.appendVarint(UInt64(base - fix.timeSeconds), to: &body)
            var relative: [UInt8] = []
            if let previous {
                Self.appendVarint(Self.zigzag(place.lat - previous.lat), to: &relative)
                Self.appendVarint(Self.zigzag(place.lon - previous.lon), to: &relative)
            }
            if previous != nil, relative.count < 7 {
                head |= Head.relative
                body += relative
            } else {
                let packed = UInt64(place.lat + 9_000_000) << 31 | UInt64(place.lon + 18_000_000) << 5
                Self.appendBigEndian(packed, bytes: 7, to: &body)
            }
            previous = place
            let (speed, course) = Self.motion(fix)
            if speed != Self.unknownSpeed || course != Self.unknownCourse {
                head |= Head.motion
                Self.appendBigEndian(UInt64(speed) << 9 | UInt64(course), bytes: 2, to: &body)
            }
            if let alarm = fix.alarm {
                guard let code = Self.alarmCodes.firstIndex(of: alarm) else {
                    throw SBDMessageError("fix \(index): alarm \"\(alarm)\" has no code")
                }
                head |= Head.alarm
                body.append(UInt8(code + 1))
            }
            out.append(head)
            out += body
        }
        return out
    }

    /// The message in `bytes`, checked throughout: every field read within the bytes, every value
    /// in its range, nothing left over.
    package static func decode(_ bytes: [UInt8]) throws(SBDMessageError) -> SBDMessage {
        var reader = Reader(bytes: bytes)
        let version = try reader.byte("the format version")
        guard version == Self.version else {
            throw SBDMessageError("format version \(version) is not one this relay reads (\(Self.version))")
        }
        let relayID = try reader.varint("the relay id", max: UInt64(UInt32.max))
        let sequence = try reader.varint("the sequence number", max: UInt64(UInt32.max))
        let roster = try reader.byte("the roster check")
        let count = Int(try reader.byte("the number of fixes"))
        guard (1...maximumFixes).contains(count) else {
            throw SBDMessageError("\(count) fixes: a message carries 1 to \(maximumFixes)")
        }
        let base = Int64(try reader.bigEndian(4, "the base time")) + epochSeconds
        var fixes: [Fix] = []
        var previous: (lat: Int64, lon: Int64)?
        while fixes.count < count {
            let what = "fix \(fixes.count)"
            let head = try reader.byte("\(what)'s head")
            let age = try reader.varint("\(what)'s age", max: UInt64(UInt32.max))
            guard Int64(age) <= base - epochSeconds else {
                throw SBDMessageError("\(what): age \(age) s is before 2024, at byte \(reader.offset)")
            }
            var place: (lat: Int64, lon: Int64)
            if head & Head.relative != 0 {
                guard let previous else {
                    throw SBDMessageError("\(what): a place relative to no fix before it, at byte \(reader.offset)")
                }
                let dLat = unzigzag(try reader.varint("\(what)'s latitude difference", max: latitudeSteps * 2))
                let dLon = unzigzag(try reader.varint("\(what)'s longitude difference", max: longitudeSteps * 2))
                place = (previous.lat + dLat, previous.lon + dLon)
            } else {
                let packed = try reader.bigEndian(7, "\(what)'s place")
                place = (Int64(packed >> 31 & 0x1FF_FFFF) - 9_000_000, Int64(packed >> 5 & 0x3FF_FFFF) - 18_000_000)
                guard packed & 0x1F == 0 else {
                    throw SBDMessageError("\(what): the place's spare bits are not zero, at byte \(reader.offset)")
                }
            }
            guard abs(place.lat) <= 9_000_000, abs(place.lon) <= 18_000_000 else {
                throw SBDMessageError("\(what): a place beyond ±90°/±180°, at byte \(reader.offset)")
            }
            previous = place
            var fix = Fix(
                unit: Int(head & Head.unit), timeSeconds: base - Int64(age), lat: Double(place.lat) / placeScale,
                lon: Double(place.lon) / placeScale)
            if head & Head.motion != 0 {
                let motion = try reader.bigEndian(2, "\(what)'s speed and course")
                let speed = UInt16(motion >> 9)
                let course = UInt16(motion & 0x1FF)
                guard course < 360 || course == unknownCourse else {
                    throw SBDMessageError("\(what): course \(course)° is not 0–359, at byte \(reader.offset)")
                }
                fix.speedKnots = speed == unknownSpeed ? nil : Double(speed) / 2
                fix.course = course == unknownCourse ? nil : Double(course)
            }
            if head & Head.alarm != 0 {
                let code = Int(try reader.byte("\(what)'s alarm"))
                guard (1...alarmCodes.count).contains(code) else {
                    throw SBDMessageError("\(what): alarm code \(code) is unknown, at byte \(reader.offset)")
                }
                fix.alarm = alarmCodes[code - 1]
            }
            fixes.append(fix)
        }
        guard reader.isAtEnd else {
            throw SBDMessageError(
                "\(bytes.count - reader.offset) bytes after the last of \(count) fixes, at byte \(reader.offset)")
        }
        return SBDMessage(relayID: UInt32(relayID), sequence: UInt32(sequence), roster: roster, fixes: fixes)
    }

    // MARK: - Fields

    /// A fix's place in 1e-5° steps, range-checked before any conversion.
    private static func quantised(_ fix: Fix, index: Int) throws(SBDMessageError) -> (lat: Int64, lon: Int64) {
        guard fix.lat.isFinite, fix.lon.isFinite, abs(fix.lat) <= 90, abs(fix.lon) <= 180 else {
            throw SBDMessageError("fix \(index): \(fix.lat), \(fix.lon) is not a place on Earth")
        }
        return (Int64((fix.lat * placeScale).rounded()), Int64((fix.lon * placeScale).rounded()))
    }

    /// Speed in half knots (up to 63 knots, more is sent as 63) and course in whole degrees, each
    /// its unknown value when missing or not finite.
    private static func motion(_ fix: Fix) -> (speed: UInt16, course: UInt16) {
        let speed: UInt16 =
            if let knots = fix.speedKnots, knots.isFinite, knots >= 0 { UInt16(min(knots * 2, 126).rounded()) } else {
                unknownSpeed
            }
        let course: UInt16 =
            if let degrees = fix.course, degrees.isFinite {
                UInt16(
                    (degrees.truncatingRemainder(dividingBy: 360) + 360).truncatingRemainder(dividingBy: 360)
                        .rounded()) % 360
            } else {
                unknownCourse
            }
        return (speed, course)
    }

    static func zigzag(_ value: Int64) -> UInt64 { UInt64(bitPattern: value << 1 ^ value >> 63) }
    static func unzigzag(_ value: UInt64) -> Int64 { Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1) }

    static func appendVarint(_ value: UInt64, to out: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            out.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        out.append(UInt8(value))
    }

    /// The `bytes` low bytes of `value`, most significant first.
    static func appendBigEndian(_ value: UInt64, bytes: Int, to out: inout [UInt8]) {
        for shift in stride(from: (bytes - 1) * 8, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: value >> shift))
        }
    }

    /// Reads a message's fields, each failure naming the field and the byte it was read at.
    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        var isAtEnd: Bool { offset == bytes.count }

        mutating func byte(_ what: String) throws(SBDMessageError) -> UInt8 {
            guard offset < bytes.count else {
                throw SBDMessageError("\(what) is missing: the message ends at byte \(bytes.count)")
            }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func bigEndian(_ count: Int, _ what: String) throws(SBDMessageError) -> UInt64 {
            guard bytes.count - offset >= count else {
                throw SBDMessageError("\(what) is cut short: \(count) bytes at byte \(offset) of \(bytes.count)")
            }
            var value: UInt64 = 0
            for byte in bytes[offset..<(offset + count)] { value = value << 8 | UInt64(byte) }
            offset += count
            return value
        }

        /// At most 10 bytes, and at most `max`.
        mutating func varint(_ what: String, max: UInt64) throws(SBDMessageError) -> UInt64 {
            let start = offset
            var value: UInt64 = 0
            for shift in stride(from: 0, to: 63, by: 7) {
                let byte = try self.byte(what)
                value |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 {
                    guard value <= max else {
                        throw SBDMessageError("\(what) \(value) is over \(max), at byte \(start)")
                    }
                    return value
                }
            }
            throw SBDMessageError("\(what) runs on past 9 bytes, at byte \(start)")
        }
    }
}

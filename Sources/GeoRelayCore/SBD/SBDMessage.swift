/// The relay's own message for Iridium Short Burst Data: a vessel's newest fixes in as few bytes
/// as a satellite credit (50 bytes) allows, decoded ashore by the shore relay (`SBDMessage.decode`).
///
/// Traccar's Iridium decoders take one position per message in a fixed layout, which spends a
/// credit on every unit; this form carries a 4-unit vessel's current positions in one credit, by
/// what a vessel's fixes share: one time (each fix's age in seconds from the newest), and one
/// place (a vessel's receivers are metres apart, so each fix after the first is a difference).
///
/// Layout (big-endian; a varint is LEB128, 7 bits a byte, least significant first):
///
///     header  version (1)  relay id (varint)  sequence (varint)  roster check (1)
///             fixes (1: how many follow, so a message cut short is refused)
///             base time (4: seconds since 2024-01-01T00:00:00Z, the newest fix's)
///     fix     head (1): unit (bits 0-4), alarm (bit 5), relative (bit 6), motion (bit 7)
///             age (varint: seconds before the base time)
///             place: absolute, 7 bytes: latitude + 90° and longitude + 180° in 1e-5° (about a
///                    metre), 25 and 26 bits, then 5 zero bits;
///                    relative: the differences from the fix before, zigzag varints of 1e-5°
///             motion (2, when bit 7): speed (7 bits, half knots, 127 unknown) and course
///                    (9 bits, whole degrees, 511 unknown)
///             alarm (1, when bit 5): `alarmCodes`' place of the alarm, from 1
///
/// The relay id and the sequence make every message idempotent ashore; the roster check says
/// both ends number the vessel's units from the same list (`rosterCheck`).
package struct SBDMessage: Sendable, Equatable {
    package static let version: UInt8 = 1
    /// What one credit carries; a message of 51 bytes costs two.
    package static let creditBytes = 50
    /// The largest mobile-originated message a 9602/9603 takes (`AT+SBDWB`).
    package static let maximumBytes = 340
    /// Units a vessel may number: 5 bits.
    package static let maximumUnits = 32
    /// 2024-01-01T00:00:00Z: base times are counted from it, in 4 bytes, until 2160.
    package static let epochSeconds: Int64 = 1_704_067_200

    /// One fix of one unit, as the message carries it: time to the second, place to 1e-5°.
    package struct Fix: Sendable, Equatable {
        /// The unit's number in the vessel's roster, 0 to 31.
        package var unit: Int
        /// Seconds since 1970.
        package var timeSeconds: Int64
        package var lat: Double
        package var lon: Double
        /// Knots, in half knots up to 63; nil when unknown.
        package var speedKnots: Double?
        /// Degrees from true north, whole; nil when unknown.
        package var course: Double?
        /// A Traccar alarm name from `alarmCodes`.
        package var alarm: String?

        package init(
            unit: Int, timeSeconds: Int64, lat: Double, lon: Double, speedKnots: Double? = nil, course: Double? = nil,
            alarm: String? = nil
        ) {
            self.unit = unit
            self.timeSeconds = timeSeconds
            self.lat = lat
            self.lon = lon
            self.speedKnots = speedKnots
            self.course = course
            self.alarm = alarm
        }
    }

    /// Who sent it: the relay's configured id (0 when the modem's IMEI alone names the vessel ashore).
    package var relayID: UInt32
    /// The relay's count of messages, so a message delivered twice is known ashore.
    package var sequence: UInt32
    /// `rosterCheck` of the vessel's unit list.
    package var roster: UInt8
    /// Newest first or in any order: ages are taken from the newest.
    package var fixes: [Fix]

    package init(relayID: UInt32, sequence: UInt32, roster: UInt8, fixes: [Fix]) {
        self.relayID = relayID
        self.sequence = sequence
        self.roster = roster
        self.fixes = fixes
    }

    /// Traccar's alarm names (`Position.ALARM_*`), numbered from 1 by their place here. Append
    /// only: a number once sent keeps its meaning.
    package static let alarmCodes = [
        "general", "sos", "vibration", "movement", "lowspeed", "overspeed", "fallDown", "lowPower", "lowBattery",
        "fault", "powerOff", "powerOn", "door", "lock", "unlock", "geofence", "geofenceEnter", "geofenceExit",
        "gpsAntennaCut", "accident", "tow", "idle", "highRpm", "hardAcceleration", "hardBraking", "hardCornering",
        "laneChange", "fatigueDriving", "powerCut", "powerRestored", "jamming", "temperature", "parking", "bonnet",
        "footBrake", "fuelLeak", "tampering", "removing",
    ]

    /// The alarm a position's `alarm` sends: the first of its comma-separated names that has a
    /// code, else `general` (an alarm is never dropped for its name).
    package static func alarmName(for alarm: String) -> String {
        alarm.split(separator: ",").lazy.map { name in
            String(name.drop { $0 == " " }.prefix { $0 != " " })
        }.first { alarmCodes.contains($0) } ?? "general"
    }

    /// One byte that differs, almost always, between two different unit lists: both ends must
    /// number units from the same list, and a message from a vessel whose list differs from the
    /// shore's is refused rather than filed under the wrong devices. FNV-1a over the ids, each
    /// ended by a newline, folded to 8 bits.
    package static func rosterCheck(_ units: [String]) -> UInt8 {
        var hash: UInt32 = 2_166_136_261
        for unit in units {
            for byte in Array(unit.utf8) + [0x0A] { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        }
        return UInt8(truncatingIfNeeded: hash ^ hash >> 8 ^ hash >> 16 ^ hash >> 24)
    }
}

/// Why bytes are not a message of ours, or a fix cannot go in one: what and where.
package struct SBDMessageError: Error, Sendable, Equatable, CustomStringConvertible {
    package let message: String

    package init(_ message: String) {
        self.message = message
    }

    package var description: String { message }
}

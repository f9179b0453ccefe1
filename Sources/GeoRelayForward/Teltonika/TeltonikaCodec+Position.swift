import GeoRelayCore

/// From the relay's ``Position`` to a Teltonika record, as Traccar will read it back.
///
/// Only IO ids that `TeltonikaProtocolDecoder` maps for every device model are used
/// (its `register(id, any, …)` calls); an id mapped only for some models would arrive
/// as a bare `io<id>` on a Traccar device with no model set. Each id goes in the section
/// whose width its handler reads.
///
/// | Relay                         | Teltonika                    | Traccar stores                         | Decoder line relied on |
/// |-------------------------------|------------------------------|----------------------------------------|------------------------|
/// | `timeMs`                      | timestamp, ms                | fix time                               | `position.setTime(new Date(buf.readLong()))` |
/// | `lat`, `lon`                  | degrees × 10⁷, rounded       | same / 10⁷                             | `buf.readInt() / 10000000.0` |
/// | `altitude` (nil → 0)          | whole metres, clamped ±32767 | altitude                               | `position.setAltitude(buf.readShort())` |
/// | `course` (nil → 0)            | whole degrees, 0–359         | course                                 | `position.setCourse(buf.readUnsignedShort())` |
/// | `speed` m/s (nil → 0)         | whole km/h, rounded          | knots (km/h × 0.539957)                | `UnitsConverter.knotsFromKph(buf.readUnsignedShort())` |
/// | satellites (see below)        | satellites byte              | `sat`; valid = satellites ≠ 0          | `position.setValid(satellites != 0)` |
/// | `alarm` `general`             | IO 236 = 1 (1 byte)          | `alarm=general`                        | `register(236, any, … ALARM_GENERAL …)` |
/// | `alarm` `hardAcceleration`, `hardBraking`, `hardCornering` | IO 253 = 1, 2, 3 (1 byte) | the same names | `register(253, any, …)` |
/// | any other `alarm` name        | IO 236 = 1                   | `alarm=general` (the name is lost)     | as 236 |
/// | `battery` level %             | IO 113 (1 byte)              | `batteryLevel` only for models `FM[B-Z]...`, `MTB100`, `MSP500`; else `io113` | `register(113, fmbXXX, …)` |
/// | attribute `hdop`              | IO 182 (2 bytes), × 10       | `hdop`                                 | `register(182, any, … readUnsignedShort() / 10.0)` |
/// | attribute `pdop`              | IO 181 (2 bytes), × 10       | `pdop`                                 | `register(181, any, …)` |
/// | attribute `motion` (bool)     | IO 240 (1 byte)              | `motion`                               | `register(240, any, … readUnsignedByte() > 0)` |
/// | attribute `ignition` (bool)   | IO 239 (1 byte)              | `ignition`                             | `register(239, any, …)` |
/// | attribute `power` (V)         | IO 66 (2 bytes), mV          | `power` (V)                            | `register(66, any, … readUnsignedShort() / 1000.0)` |
/// | attribute `battery` (V)       | IO 67 (2 bytes), mV          | `battery` (V)                          | `register(67, any, …)` |
/// | `odometer` (m)                | IO 16 (4 bytes)              | `odometer`                             | `register(16, any, … readUnsignedInt())` |
/// | attribute `tripOdometer` (m)  | IO 199 (4 bytes)             | `tripOdometer`                         | `register(199, any, …)` |
/// | attribute `rssi`              | IO 21 (1 byte)               | `rssi`                                 | `register(21, any, …)` |
/// | attributes `in1`–`in4`, `out1`, `out2` (bool) | IO 1–4, 179, 180 (1 byte) | the same names       | `register(1…4, any, …)`, `register(179/180, any, …)` |
///
/// Every record also arrives with Traccar's `priority` (0 low, 1 high when the position
/// carries an alarm, 2 panic for `sos`) and `event` (the alarm's IO id, else 0) attributes.
///
/// What cannot be carried:
///
/// | Relay                                  | Why                                                                  |
/// |----------------------------------------|----------------------------------------------------------------------|
/// | `accuracy`                             | no field; Traccar's `accuracy` stays 0                               |
/// | speed below 1 km/h steps               | whole km/h: ±0.5 km/h (0.14 m/s)                                     |
/// | course and altitude fractions          | whole degrees, whole metres                                          |
/// | `charging`                             | no IO id Traccar maps to `charge`                                    |
/// | alarm names other than the four above  | arrive as `general`; several alarms arrive as one `general`          |
/// | string attributes, other numbers       | no id names them; an NX element would arrive as hex under `io<id>`   |
/// | values that do not fit their element   | left out, not clamped (a negative `rssi` in dBm, 70 V of `power`)    |
extension TeltonikaCodec {
    /// Satellites claimed for a fix whose source did not say how many it used.
    ///
    /// Traccar marks a Teltonika position invalid when the satellites byte is 0, and the
    /// relay only holds fixes, so the byte must not be 0. 3 is the fewest satellites that
    /// give a fix at all (2D), so the stored `sat` claims no more than the fix implies;
    /// 1 or 2 would be impossible for a fix and read as corruption.
    package static let defaultSatellites: UInt8 = 3

    /// The record for `position`.
    ///
    /// Satellites, in order: `satellites` when given; 0 when the position carries a `valid`
    /// attribute that Traccar's OsmAnd decoder would read as false (anything but `true` or
    /// `1`), so Traccar marks it invalid in the same way; a `sat` or `satellites` attribute
    /// when it is a whole number 0–255; else ``defaultSatellites``.
    /// Attributes named more than once count by their last value, as Traccar's `set` does.
    package static func record(from position: Position, satellites: Int? = nil) -> Record {
        func attribute(_ key: String) -> AttributeValue? {
            if key == "odometer", let metres = position.odometer { return .number(metres) }
            return position.attributes.last { $0.key == key }?.value
        }

        var io = IOElements()
        for mapping in attributeMappings {
            guard let value = attribute(mapping.key), let raw = mapping.raw(value) else { continue }
            switch mapping.width {
            case .one: io.oneByte.append(IOElement(mapping.id, UInt8(raw)))
            case .two: io.twoBytes.append(IOElement(mapping.id, UInt16(raw)))
            case .four: io.fourBytes.append(IOElement(mapping.id, UInt32(raw)))
            }
        }
        if let level = position.battery, let raw = AttributeMapping.fit(level.rounded(), max: 100) {
            io.oneByte.append(IOElement(113, UInt8(raw)))
        }

        let alarm = alarmElements(position.alarm)
        io.oneByte += alarm.elements

        return Record(
            timeMs: position.timeMs,
            priority: alarm.priority,
            longitudeE7: clamped(position.lon * 1e7),
            latitudeE7: clamped(position.lat * 1e7),
            altitude: clamped(position.altitude ?? 0),
            angle: wholeDegrees(position.course ?? 0),
            satellites: satelliteCount(
                explicit: satellites, valid: attribute("valid"), stated: attribute("sat") ?? attribute("satellites")),
            speedKmh: clamped((position.speed ?? 0) * 3.6),
            eventID: alarm.eventID,
            io: io)
    }

    private static func satelliteCount(explicit: Int?, valid: AttributeValue?, stated: AttributeValue?) -> UInt8 {
        if let explicit { return UInt8(clamping: explicit) }
        if let valid {
            let text = valid.text
            if !(text.lowercased() == "true" || text == "1") { return 0 }
        }
        if case .number(let n)? = stated, n == n.rounded(), (0...255).contains(n) { return UInt8(n) }
        return defaultSatellites
    }

    /// IO 236 for the general alarm and for names Traccar's Teltonika decoder has no id
    /// for, IO 253 for the three driving alarms; the event id names the element that
    /// triggered the record, as Teltonika devices do.
    private static func alarmElements(_ alarm: String?) -> (
        elements: [IOElement<UInt8>], eventID: UInt16, priority: Priority
    ) {
        let names = (alarm ?? "").split(separator: ",").map { $0.filter { $0 != " " } }.filter { !$0.isEmpty }
        guard !names.isEmpty else { return ([], 0, .low) }
        var general = false
        var driving: [UInt8] = []
        for name in names {
            let code: UInt8? =
                switch name {
                case "hardAcceleration": 1
                case "hardBraking": 2
                case "hardCornering": 3
                default: nil
                }
            if let code {
                if !driving.contains(code) { driving.append(code) }
            } else {
                general = true
            }
        }
        var elements: [IOElement<UInt8>] = []
        if general { elements.append(IOElement(236, 1)) }
        // Traccar adds an alarm per element (`addAlarm` joins them with commas).
        elements += driving.map { IOElement(253, $0) }
        return (elements, general ? 236 : 253, names.contains("sos") ? .panic : .high)
    }

    /// Folded into the circle before any conversion: a stored course of 1e19 (written before
    /// ingest bounded it) trapped `Int(_:)` here and crash-looped the relay at every restart.
    private static func wholeDegrees(_ course: Double) -> UInt16 {
        guard course.isFinite else { return 0 }
        var folded = course.truncatingRemainder(dividingBy: 360).rounded()
        if folded < 0 { folded += 360 }
        return folded >= 360 ? 0 : UInt16(folded)
    }

    /// `value` rounded to the nearest integer and clamped into `T`; not-a-number is 0.
    private static func clamped<T: FixedWidthInteger>(_ value: Double) -> T {
        guard !value.isNaN else { return 0 }
        let rounded = value.rounded()
        if rounded <= Double(T.min) { return T.min }
        if rounded >= Double(T.max) { return T.max }
        return T(rounded)
    }

    /// Attributes that travel as IO elements, in the order they go on the wire.
    private static let attributeMappings: [AttributeMapping] = [
        AttributeMapping(key: "in1", id: 1, width: .one, kind: .flag),
        AttributeMapping(key: "in2", id: 2, width: .one, kind: .flag),
        AttributeMapping(key: "in3", id: 3, width: .one, kind: .flag),
        AttributeMapping(key: "in4", id: 4, width: .one, kind: .flag),
        AttributeMapping(key: "rssi", id: 21, width: .one, kind: .scaled(1)),
        AttributeMapping(key: "out1", id: 179, width: .one, kind: .flag),
        AttributeMapping(key: "out2", id: 180, width: .one, kind: .flag),
        AttributeMapping(key: "ignition", id: 239, width: .one, kind: .flag),
        AttributeMapping(key: "motion", id: 240, width: .one, kind: .flag),
        AttributeMapping(key: "power", id: 66, width: .two, kind: .scaled(1000)),
        AttributeMapping(key: "battery", id: 67, width: .two, kind: .scaled(1000)),
        AttributeMapping(key: "pdop", id: 181, width: .two, kind: .scaled(10)),
        AttributeMapping(key: "hdop", id: 182, width: .two, kind: .scaled(10)),
        AttributeMapping(key: "odometer", id: 16, width: .four, kind: .scaled(1)),
        AttributeMapping(key: "tripOdometer", id: 199, width: .four, kind: .scaled(1)),
    ]

    private struct AttributeMapping {
        enum Width: Int {
            case one = 1
            case two = 2
            case four = 4
        }
        enum Kind {
            /// Traccar reads `readUnsignedByte() > 0`.
            case flag
            /// Traccar divides the unsigned value by this.
            case scaled(Double)
        }

        let key: String
        let id: UInt16
        let width: Width
        let kind: Kind

        /// The element's unsigned value, or nil when the attribute has the wrong type or does not fit.
        func raw(_ value: AttributeValue) -> UInt64? {
            switch (kind, value) {
            case (.flag, .bool(let b)): return b ? 1 : 0
            case (.flag, .number(let n)): return n != 0 ? 1 : 0
            case (.scaled(let scale), .number(let n)):
                return Self.fit((n * scale).rounded(), max: (1 << (8 * width.rawValue)) - 1)
            default: return nil
            }
        }

        static func fit(_ value: Double, max: UInt64) -> UInt64? {
            guard value.isFinite, value >= 0, value <= Double(max) else { return nil }
            return UInt64(value)
        }
    }
}

/// One GPS fix of one device, as the relay stores and forwards it.
///
/// Units are the relay's own, whatever the collector sent: metres per second,
/// degrees, metres, milliseconds since the Unix epoch (UTC). Codecs convert at
/// the edges (knots for OsmAnd, ISO 8601 for the push endpoint).
package struct Position: Sendable, Equatable {
    /// The GPS unit's identifier (the OsmAnd `id`, Traccar's unique id).
    package var device: String
    /// Fix time in milliseconds since 1970-01-01T00:00:00Z.
    package var timeMs: Int64
    package var lat: Double
    package var lon: Double
    /// Speed over ground in metres per second.
    package var speed: Double?
    /// Course over ground in degrees from true north.
    package var course: Double?
    /// Altitude in metres.
    package var altitude: Double?
    /// Horizontal accuracy in metres.
    package var accuracy: Double?
    /// Battery level, 0–100.
    package var battery: Double?
    /// Whether the device is charging, when it says.
    package var charging: Bool?
    /// A Traccar alarm name (`sos`, `general`, `lowBattery`, …).
    package var alarm: String?
    /// Metres along the device's track up to this fix, in fix-time order: the source's own when
    /// it reports one (an `odometer` attribute), else the relay's (`Odometer`), set when stored.
    package var odometer: Double?
    /// Extra scalar fields, forwarded as they came, in order.
    package var attributes: [Attribute]

    package init(
        device: String, timeMs: Int64, lat: Double, lon: Double,
        speed: Double? = nil, course: Double? = nil, altitude: Double? = nil, accuracy: Double? = nil,
        battery: Double? = nil, charging: Bool? = nil, alarm: String? = nil, odometer: Double? = nil,
        attributes: [Attribute] = []
    ) {
        self.device = device
        self.timeMs = timeMs
        self.lat = lat
        self.lon = lon
        self.speed = speed
        self.course = course
        self.altitude = altitude
        self.accuracy = accuracy
        self.battery = battery
        self.charging = charging
        self.alarm = alarm
        self.odometer = odometer
        self.attributes = attributes
    }
}

/// A scalar value of an extra attribute.
package enum AttributeValue: Sendable, Equatable {
    case string(String)
    case number(Double)
    case bool(Bool)

    /// The value as it appears in a form parameter or a log line.
    package var text: String {
        switch self {
        case .string(let s): s
        case .number(let n): JSONValue.format(number: n)
        case .bool(let b): b ? "true" : "false"
        }
    }

    package var json: JSONValue {
        switch self {
        case .string(let s): .string(s)
        case .number(let n): .number(n)
        case .bool(let b): .bool(b)
        }
    }
}

/// One extra field of a position.
package struct Attribute: Sendable, Equatable {
    package var key: String
    package var value: AttributeValue

    package init(_ key: String, _ value: AttributeValue) {
        self.key = key
        self.value = value
    }
}

extension [Attribute] {
    /// The attributes as a JSON object text, the form the spool stores them in.
    package var jsonText: String {
        JSONValue.object(JSONObject(map { ($0.key, $0.value.json) })).jsonText
    }

    /// Reads attributes back from their stored JSON text; anything unreadable yields none.
    package init(jsonText: String) {
        guard case .object(let object)? = try? JSONParser.parse(jsonText) else {
            self = []
            return
        }
        self = object.members.compactMap { member in
            switch member.value {
            case .string(let s): Attribute(member.key, .string(s))
            case .number(let n): Attribute(member.key, .number(n))
            case .bool(let b): Attribute(member.key, .bool(b))
            default: nil
            }
        }
    }
}

/// The OsmAnd protocol's query-string form, as the Traccar client sends it and
/// Traccar's `OsmAndProtocolDecoder` reads it.
///
/// Speed travels in knots; everything else in the relay's own units. Keys the
/// protocol does not define travel as extra attributes, which Traccar stores
/// as they come (a number if it parses as one, `true`/`false`, else text).
package enum OsmAndQuery {
    /// One knot in metres per second.
    package static let metresPerSecondPerKnot = 1852.0 / 3600.0

    /// Splits `a=1&b=2` into ordered, percent-decoded pairs (`+` is a space).
    package static func parameters(_ query: String) -> [(key: String, value: String)] {
        var text = Substring(query)
        if text.hasPrefix("/?") { text = text.dropFirst(2) } else if text.hasPrefix("?") { text = text.dropFirst() }
        return text.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            if let eq = pair.firstIndex(of: "=") {
                return (percentDecode(pair[..<eq]), percentDecode(pair[pair.index(after: eq)...]))
            }
            return (percentDecode(pair), "")
        }
    }

    /// Decodes the relay's ingest form of an OsmAnd query into a position.
    package static func decode(_ query: String, defaultDevice: String?) throws(IngestError) -> Position {
        var device = defaultDevice
        var timeMs: Int64?
        var lat: Double?
        var lon: Double?
        var position = Position(device: "", timeMs: 0, lat: 0, lon: 0)
        func number(_ key: String, _ value: String) throws(IngestError) -> Double {
            guard let n = Double(value) else { throw .parse("\(key): \"\(value.prefix(40))\" is not a number") }
            return n
        }
        let pairs = parameters(query)
        let known: Set<String> = ["id", "deviceid", "timestamp", "lat", "lon", "location"]
        if !pairs.contains(where: { known.contains($0.key) && !$0.value.isEmpty }) {
            throw .parse("not a JSON object, NMEA sentence or OsmAnd query (no id, timestamp, lat or lon)")
        }
        for (key, value) in pairs {
            switch key {
            case "id", "deviceid": device = value
            case "timestamp":
                guard let ms = timestamp(value) else {
                    throw .time("timestamp: \"\(value.prefix(40))\" is not a Unix time or ISO 8601 date")
                }
                timeMs = ms
            case "lat": lat = try number(key, value)
            case "lon": lon = try number(key, value)
            case "location":
                let parts = value.split(separator: ",")
                guard parts.count == 2, let a = Double(parts[0]), let b = Double(parts[1]) else {
                    throw .parse("location: expected \"lat,lon\", got \"\(value.prefix(40))\"")
                }
                lat = a
                lon = b
            case "speed": position.speed = try number(key, value) * metresPerSecondPerKnot
            case "bearing", "heading": position.course = try number(key, value)
            case "altitude": position.altitude = try number(key, value)
            case "accuracy": position.accuracy = try number(key, value)
            case "batt": position.battery = try number(key, value)
            case "charge": position.charging = value == "true"
            case "alarm": position.alarm = value.isEmpty ? nil : value
            default:
                if key.isEmpty { throw .parse("empty parameter name") }
                position.attributes.append(Attribute(key, attributeValue(value)))
            }
        }
        guard let device, !device.isEmpty else { throw .device("no device id: give id= or send a hello first") }
        guard let timeMs else { throw .time("missing timestamp") }
        guard let lat, let lon else { throw .parse("missing lat or lon") }
        position.device = device
        position.timeMs = timeMs
        position.lat = lat
        position.lon = lon
        return position
    }

    /// Traccar's timestamp rule: an integer below 2^31-1 is seconds, a larger
    /// one milliseconds; otherwise ISO 8601 with a zone, or `yyyy-MM-dd HH:mm:ss`
    /// (taken as UTC here; Traccar uses its own zone).
    package static func timestamp(_ value: String) -> Int64? {
        if let integer = Int64(value) {
            guard integer >= 0 else { return nil }
            return integer < Int64(Int32.max) ? integer * 1000 : integer
        }
        if value.contains("T") { return Timestamp.milliseconds(fromISO8601: value) }
        return Timestamp.milliseconds(fromISO8601: value.replacing(" ", with: "T") + "Z")
    }

    /// How Traccar types an unknown parameter: a number if it parses, exact `true`/`false`, else text.
    package static func attributeValue(_ value: String) -> AttributeValue {
        if let n = Double(value), n.isFinite { return .number(n) }
        if value == "true" { return .bool(true) }
        if value == "false" { return .bool(false) }
        return .string(value)
    }

    /// The form body for one position: one request per position, parameters in
    /// the body only (Traccar reads the body only when the URL has none).
    package static func encode(_ p: Position, extra: [Attribute] = []) -> String {
        var out = ""
        out.reserveCapacity(160)
        func add(_ key: String, _ value: String) {
            if !out.isEmpty { out += "&" }
            out += percentEncode(key)
            out += "="
            out += percentEncode(value)
        }
        func add(_ key: String, _ value: Double?) {
            if let value { add(key, JSONValue.format(number: value)) }
        }
        add("id", p.device)
        // Whole seconds when exact (Traccar parses integers only); milliseconds otherwise.
        add("timestamp", p.timeMs % 1000 == 0 ? String(p.timeMs / 1000) : String(p.timeMs))
        add("lat", p.lat)
        add("lon", p.lon)
        add("speed", p.speed.map { ($0 / metresPerSecondPerKnot * 1000).rounded() / 1000 })
        add("bearing", p.course)
        add("altitude", p.altitude)
        add("accuracy", p.accuracy)
        add("batt", p.battery)
        if p.charging == true { add("charge", "true") }
        if let alarm = p.alarm { add("alarm", alarm) }
        // Traccar keeps it as the `odometer` attribute its reports measure distance by.
        add("odometer", p.odometer ?? Odometer.reported(p))
        for attribute in p.attributes + extra where !attribute.key.isEmpty && !reservedKeys.contains(attribute.key) {
            add(attribute.key, attribute.value.text)
        }
        return out
    }

    /// The form for one position within `maxBytes`: extra attributes are left out, the longest
    /// first, until it fits (the id, time, coordinates, motion fields and alarm always stay).
    /// A server reads no more: Traccar's HTTP decoder answers a request line over 4,096 bytes
    /// (Netty's default) as an empty request, `400`, which would park the device behind it.
    package static func encode(_ p: Position, fitting maxBytes: Int) -> String {
        var encoded = encode(p)
        guard encoded.utf8.count > maxBytes else { return encoded }
        var trimmed = p
        while encoded.utf8.count > maxBytes,
            let longest = trimmed.attributes.indices.max(by: {
                trimmed.attributes[$0].key.utf8.count + trimmed.attributes[$0].value.text.utf8.count
                    < trimmed.attributes[$1].key.utf8.count + trimmed.attributes[$1].value.text.utf8.count
            })
        {
            trimmed.attributes.remove(at: longest)
            encoded = encode(trimmed)
        }
        return encoded
    }

    /// Netty's default longest request line, which Traccar's OsmAnd port keeps.
    package static let maxRequestLineBytes = 4096
    /// The body Traccar's OsmAnd port aggregates (`HttpObjectAggregator(65535)`).
    package static let maxBodyBytes = 65_535

    /// Keys the encoder writes itself; an attribute of the same name would make the position ambiguous.
    private static let reservedKeys: Set<String> = [
        "id", "deviceid", "timestamp", "lat", "lon", "location", "speed", "bearing", "heading",
        "altitude", "accuracy", "batt", "charge", "alarm", "odometer",
    ]

    private static func isUnreserved(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c | 0x20 >= 0x61 && c | 0x20 <= 0x7A) || c == 0x2D || c == 0x2E || c == 0x5F
            || c == 0x7E
    }

    package static func percentEncode(_ s: String) -> String {
        if s.utf8.allSatisfy(isUnreserved) { return s }
        var out = [UInt8]()
        out.reserveCapacity(s.utf8.count)
        let hex = Array("0123456789ABCDEF".utf8)
        for c in s.utf8 {
            if isUnreserved(c) {
                out.append(c)
            } else {
                out.append(0x25)
                out.append(hex[Int(c >> 4)])
                out.append(hex[Int(c & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    package static func percentDecode<S: StringProtocol>(_ s: S) -> String {
        var out = [UInt8]()
        let bytes = Array(s.utf8)
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            if c == 0x2B {
                out.append(0x20)
            } else if c == 0x25, i + 2 < bytes.count, let h = HexDigit.value(bytes[i + 1]),
                let l = HexDigit.value(bytes[i + 2])
            {
                out.append(h << 4 | l)
                i += 2
            } else {
                out.append(c)
            }
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }
}

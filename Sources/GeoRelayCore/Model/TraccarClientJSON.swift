/// The JSON body current Traccar Client apps send (the Transistor background
/// geolocation format), as Traccar's `OsmAndProtocolDecoder` reads it:
/// `{"device_id": ..., "location": {"timestamp": ..., "coords": {...}, "battery": {...}, "is_moving": ..., "extras": {...}}}`.
package enum TraccarClientJSON {
    package static func decode(_ body: String) throws(IngestError) -> Position {
        let value: JSONValue
        do {
            value = try JSONParser.parse(body)
        } catch {
            throw .parse("JSON body: \(error.message)")
        }
        guard case .object(let root) = value else { throw .parse("JSON body: expected an object") }
        guard case .string(let device)? = root["device_id"], !device.isEmpty else {
            throw .device("JSON body: no device_id")
        }
        guard case .object(let location)? = root["location"] else { throw .parse("JSON body: no location") }
        guard case .string(let stamp)? = location["timestamp"], let timeMs = Timestamp.milliseconds(fromISO8601: stamp)
        else {
            throw .time("JSON body: location.timestamp missing or not ISO 8601 with a zone")
        }
        guard case .object(let coords)? = location["coords"],
            case .number(let lat)? = coords["latitude"], case .number(let lon)? = coords["longitude"]
        else {
            throw .parse("JSON body: location.coords.latitude and longitude are required")
        }
        func number(_ object: JSONObject, _ key: String) -> Double? {
            if case .number(let n)? = object[key] { return n }
            return nil
        }
        var position = Position(device: device, timeMs: timeMs, lat: lat, lon: lon)
        // Negative speed and heading mean "unknown" in this format.
        position.speed = number(coords, "speed").flatMap { $0 >= 0 ? $0 : nil }
        position.course = number(coords, "heading").flatMap { $0 >= 0 ? $0 : nil }
        position.accuracy = number(coords, "accuracy").flatMap { $0 >= 0 ? $0 : nil }
        position.altitude = number(coords, "altitude")
        if case .object(let battery)? = location["battery"] {
            if let level = number(battery, "level"), level >= 0 { position.battery = (level * 100).rounded() }
            if battery["is_charging"] == .bool(true) { position.charging = true }
        }
        if case .bool(let moving)? = location["is_moving"] {
            position.attributes.append(Attribute("motion", .bool(moving)))
        }
        if case .string(let event)? = location["event"] {
            position.attributes.append(Attribute("event", .string(event)))
        }
        var extras = JSONObject()
        if case .object(let object)? = location["extras"] { extras = object }
        if case .string(let alarm)? = location["alarm"] ?? extras["alarm"] { position.alarm = alarm }
        for member in extras.members where member.key != "alarm" {
            switch member.value {
            case .string(let s): position.attributes.append(Attribute(member.key, .string(s)))
            case .number(let n): position.attributes.append(Attribute(member.key, .number(n)))
            case .bool(let b): position.attributes.append(Attribute(member.key, .bool(b)))
            default: break
            }
        }
        return position
    }
}

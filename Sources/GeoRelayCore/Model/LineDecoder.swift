/// What one line of the socket protocol holds.
package enum IngestLine: Sendable, Equatable {
    /// A position to store.
    case position(Position)
    /// `{"hello": {...}}`: the connection's default device and whether it wants acks.
    case hello(device: String?, ack: Bool?)
    /// A valid line that holds no position (`skip <reason>`).
    case skip(String)
    /// An NMEA 0183 sentence: positions come from the connection's fix cycles.
    case nmea(NMEASentence)
    /// A gpsd report that stores nothing and tells the integrity watch of a receiver (`device`,
    /// nil for the connection's): the sky it hears (`SKY`), or a cycle without a fix (`TPV` mode 0 or 1).
    case gnss(device: String?, GNSSReport)
}

/// What a gpsd report without a position says of its receiver.
package enum GNSSReport: Sendable, Equatable {
    case sky(GNSSSample.Sky)
    case noFix
}

/// Decodes the socket protocol's line forms into positions.
///
/// The first character decides the form: `{` a JSON object (a position, a
/// gpsd report, or a hello), `$` NMEA 0183 (a sentence, turned into fixes by
/// the fix-cycle assembler; `!` AIS is refused), anything else an OsmAnd query
/// string as the Traccar client sends it.
package struct LineDecoder: Sendable {
    /// How far ahead of the relay's clock a fix time may be.
    package var maxFutureMs: Int64

    package init(maxFutureSeconds: Int = 600) {
        // The config bounds this; clamped again so no caller can overflow it.
        self.maxFutureMs = Int64(min(max(maxFutureSeconds, 0), 10 * 365 * 86_400)) * 1000
    }

    /// Decodes one line without its terminator. A position it returns is not validated yet:
    /// `IngestSession` validates every position, whatever form it came in, in one place.
    /// - Parameters:
    ///   - defaultDevice: the connection's hello device, for lines that name none.
    package func decode(_ line: UnsafeBufferPointer<UInt8>, defaultDevice: String?) throws(IngestError) -> IngestLine {
        var start = 0
        var end = line.count
        while start < end, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
        while end > start, line[end - 1] == 0x20 || line[end - 1] == 0x09 || line[end - 1] == 0x0D { end -= 1 }
        let body = UnsafeBufferPointer(rebasing: line[start..<end])
        guard let first = body.first else { return .skip("empty") }
        switch first {
        case UInt8(ascii: "{"):
            let value: JSONValue
            do {
                value = try JSONParser.parse(body)
            } catch {
                throw .parse("\(error.message) at byte \(error.offset + start + 1)")
            }
            guard case .object(let object) = value else { throw .parse("expected a JSON object") }
            return try decodeObject(object, defaultDevice: defaultDevice)
        case UInt8(ascii: "$"):
            return .nmea(try NMEASentence.parse(String(decoding: body, as: UTF8.self)))
        case UInt8(ascii: "!"):
            throw .unsupported("AIS and other '!' sentences carry no position of this vessel")
        case _ where first < 0x20 || first >= 0x7F:
            // Binary frames a receiver interleaves with NMEA: a sentence after them still counts.
            guard let dollar = body.firstIndex(of: UInt8(ascii: "$")) else { return .skip("binary") }
            return .nmea(
                try NMEASentence.parse(String(decoding: UnsafeBufferPointer(rebasing: body[dollar...]), as: UTF8.self)))
        default:
            let text = String(decoding: body, as: UTF8.self)
            return .position(try OsmAndQuery.decode(text, defaultDevice: defaultDevice))
        }
    }

    package func decode(_ line: String, defaultDevice: String? = nil) throws(IngestError) -> IngestLine {
        var copy = line
        let result: Result<IngestLine, IngestError> = copy.withUTF8 { buffer in
            do throws(IngestError) {
                return .success(try decode(buffer, defaultDevice: defaultDevice))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    // MARK: - JSON forms

    private func decodeObject(_ object: JSONObject, defaultDevice: String?) throws(IngestError) -> IngestLine {
        if let hello = object["hello"] {
            guard case .object(let fields) = hello else { throw .parse("hello: expected an object") }
            var reader = FieldReader(object: fields, prefix: "hello.")
            let device = try reader.string("device")
            let ack = try reader.bool("ack")
            try reader.rejectUnknown()
            if let device, device.isEmpty { throw .device("hello.device: empty device id") }
            if let device, ControlEscaping.containsControl(device) || device.utf8.count > 128 {
                throw .device("hello.device: a device id is at most 128 bytes without control characters")
            }
            return .hello(device: device, ack: ack)
        }
        if let classValue = object["class"] {
            guard case .string(let name) = classValue else { throw .parse("class: expected a string") }
            switch name {
            case "TPV": return try decodeTPV(object, defaultDevice: defaultDevice)
            case "SKY": return try decodeSKY(object, defaultDevice: defaultDevice)
            default: return .skip("class \(name)")
            }
        }
        var reader = FieldReader(object: object, prefix: "")
        let device = try reader.string("device", alias: "id") ?? defaultDevice
        let time = try reader.time("time")
        let lat = try reader.number("lat")
        let lon = try reader.number("lon")
        let named = try requireDevice(device)
        var position = Position(
            device: named,
            timeMs: try requireTime(time, device: named),
            lat: try require(lat, "lat"),
            lon: try require(lon, "lon"))
        position.speed = try reader.number("speed")
        position.course = try reader.number("course", alias: "track", "bearing")
        position.altitude = try reader.number("alt")
        position.accuracy = try reader.number("accuracy", alias: "eph")
        position.battery = try reader.number("batt")
        position.charging = try reader.bool("charge")
        position.alarm = try reader.string("alarm")
        if let attributes = reader.take("attributes") {
            guard case .object(let fields) = attributes else { throw .parse("attributes: expected an object") }
            for member in fields.members {
                // Found by the fuzzer: a nameless attribute cannot be sent as an OsmAnd parameter.
                guard !member.key.isEmpty else { throw .parse("attributes: an attribute needs a name") }
                position.attributes.append(
                    Attribute(member.key, try scalar(member.value, at: "attributes.\(member.key)")))
            }
        }
        // Any other scalar key is kept as an attribute, as Traccar keeps unknown OsmAnd parameters.
        for member in reader.remaining {
            guard !member.key.isEmpty else { throw .parse("an attribute needs a name (a key \"\" was given)") }
            position.attributes.append(Attribute(member.key, try scalar(member.value, at: member.key)))
        }
        return .position(position)
    }

    private func scalar(_ value: JSONValue, at path: String) throws(IngestError) -> AttributeValue {
        switch value {
        case .string(let s): .string(s)
        case .number(let n): .number(n)
        case .bool(let b): .bool(b)
        default: throw .parse("\(path): expected a string, number or boolean, got \(value.kindName)")
        }
    }

    func requireDevice(_ device: String?) throws(IngestError) -> String {
        guard let device, !device.isEmpty else {
            throw .device("no device id: give \"device\" or send a hello first")
        }
        guard device.utf8.count <= 128 else { throw .device("device id longer than 128 bytes") }
        return device
    }

    func requireTime(_ time: Int64?, device: String) throws(IngestError) -> Int64 {
        guard let time else { throw .missingTime(device: device) }
        return time
    }

    private func require(_ value: Double?, _ name: String) throws(IngestError) -> Double {
        guard let value else { throw .parse("missing \(name)") }
        return value
    }

    /// The checks every form shares, and the one normalisation: every field within
    /// ``PositionBounds``, a plausible time, identifiers without control characters, and the
    /// course folded into 0…<360.
    ///
    /// Called in one place, `IngestSession`, for every position it is about to store (a
    /// line's, a fix cycle's, a phone's); `decode` only reads what the line says.
    package func validated(_ position: Position, nowMs: Int64) throws(IngestError) -> Position {
        if ControlEscaping.containsControl(position.device) {
            throw .device(
                "device id \"\(ControlEscaping.escape(String(position.device.prefix(40))))\" holds control characters")
        }
        if let alarm = position.alarm, ControlEscaping.containsControl(alarm) {
            throw .parse("alarm \"\(ControlEscaping.escape(String(alarm.prefix(40))))\" holds control characters")
        }
        if let problem = PositionBounds.problem(in: position) { throw problem }
        if nowMs >= WallClock.plausibleMs, position.timeMs > nowMs + maxFutureMs {
            throw .time(
                "fix time \(Timestamp.iso8601(milliseconds: position.timeMs)) is more than \(maxFutureMs / 1000) s ahead of the relay's clock"
            )
        }
        var normalised = position
        normalised.course = position.course.flatMap(PositionBounds.folded(course:))
        return normalised
    }
}

/// Reads typed fields of one JSON object, remembering which were used.
struct FieldReader {
    private var object: JSONObject
    private let prefix: String
    private var used: Set<String> = []

    init(object: JSONObject, prefix: String) {
        self.object = object
        self.prefix = prefix
    }

    mutating func take(_ key: String) -> JSONValue? {
        used.insert(key)
        return object[key]
    }

    private mutating func first(_ key: String, _ aliases: [String]) -> (String, JSONValue)? {
        for name in [key] + aliases {
            if let value = take(name), value != .null { return (name, value) }
        }
        return nil
    }

    mutating func string(_ key: String, alias aliases: String...) throws(IngestError) -> String? {
        guard let (name, value) = first(key, aliases) else { return nil }
        switch value {
        case .string(let s): return s
        case .number(let n): return JSONValue.format(number: n)
        default: throw .parse("\(prefix)\(name): expected a string, got \(value.kindName)")
        }
    }

    mutating func number(_ key: String, alias aliases: String...) throws(IngestError) -> Double? {
        guard let (name, value) = first(key, aliases) else { return nil }
        switch value {
        case .number(let n): return n
        case .string(let s):
            if let n = Double(s) { return n }
            throw .parse("\(prefix)\(name): expected a number, got \"\(s.prefix(40))\"")
        default: throw .parse("\(prefix)\(name): expected a number, got \(value.kindName)")
        }
    }

    mutating func bool(_ key: String) throws(IngestError) -> Bool? {
        guard let (name, value) = first(key, []) else { return nil }
        switch value {
        case .bool(let b): return b
        case .string("true"): return true
        case .string("false"): return false
        default: throw .parse("\(prefix)\(name): expected a boolean, got \(value.kindName)")
        }
    }

    mutating func time(_ key: String) throws(IngestError) -> Int64? {
        guard let (name, value) = first(key, []) else { return nil }
        switch value {
        case .number(let n):
            guard let ms = Timestamp.milliseconds(fromUnix: n) else {
                throw .time("\(prefix)\(name): \(n) is not a Unix time")
            }
            return ms
        case .string(let s):
            if let ms = Timestamp.milliseconds(fromISO8601: s) { return ms }
            if let n = Double(s), let ms = Timestamp.milliseconds(fromUnix: n) { return ms }
            throw .time("\(prefix)\(name): \"\(s.prefix(40))\" is not ISO 8601 with a zone or a Unix time")
        default:
            throw .time("\(prefix)\(name): expected a string or number, got \(value.kindName)")
        }
    }

    var remaining: [(key: String, value: JSONValue)] {
        object.members.filter { !used.contains($0.key) }
    }

    func rejectUnknown() throws(IngestError) {
        if let extra = remaining.first { throw .parse("\(prefix)\(extra.key): unknown key") }
    }
}

/// A JSON object of the configuration together with the key path that led to it.
///
/// Readers take keys one by one with a default; `finish()` then rejects any key
/// nobody took, so a misspelt key is an error at start rather than a silent
/// default that surprises the operator months later.
package struct ConfigNode {
    package let path: String
    private let object: JSONObject
    private var taken: Set<String> = []

    package init(_ value: JSONValue, path: String = "") throws(ConfigError) {
        guard case .object(let object) = value else {
            throw ConfigError(path: path, "expected an object, got \(value.kindName)")
        }
        self.path = path
        self.object = object
    }

    package func child(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    package mutating func value(_ key: String) -> JSONValue? {
        taken.insert(key)
        guard let value = object[key], value != .null else { return nil }
        return value
    }

    package func contains(_ key: String) -> Bool { object[key] != nil }

    package mutating func string(_ key: String, default fallback: String) throws(ConfigError) -> String {
        try optionalString(key) ?? fallback
    }

    package mutating func optionalString(_ key: String) throws(ConfigError) -> String? {
        guard let value = value(key) else { return nil }
        guard case .string(let s) = value else {
            throw ConfigError(path: child(key), "expected a string, got \(value.kindName)")
        }
        return s
    }

    package mutating func bool(_ key: String, default fallback: Bool) throws(ConfigError) -> Bool {
        guard let value = value(key) else { return fallback }
        guard case .bool(let b) = value else {
            throw ConfigError(path: child(key), "expected true or false, got \(value.kindName)")
        }
        return b
    }

    package mutating func number(_ key: String, default fallback: Double, min: Double? = nil, max: Double? = nil)
        throws(ConfigError) -> Double
    {
        guard let value = value(key) else { return fallback }
        guard case .number(let n) = value, n.isFinite else {
            throw ConfigError(path: child(key), "expected a number, got \(value.kindName)")
        }
        if let min, n < min {
            throw ConfigError(
                path: child(key),
                "must be at least \(JSONValue.format(number: min)), got \(JSONValue.format(number: n))")
        }
        // A key without a maximum of its own still has one: a value of 1e99 meant as "never"
        // would otherwise pass `georelay check` and trap when converted to milliseconds at run time.
        let max = max ?? Self.largestNumber
        if n > max {
            throw ConfigError(
                path: child(key), "must be at most \(JSONValue.format(number: max)), got \(JSONValue.format(number: n))"
            )
        }
        return n
    }

    /// The ceiling of every number a key does not bound itself: 10¹² (seconds are 31,700 years,
    /// bytes a terabyte), which every conversion to milliseconds or nanoseconds holds.
    package static let largestNumber: Double = 1e12

    package mutating func integer(_ key: String, default fallback: Int, min: Int? = nil, max: Int? = nil)
        throws(ConfigError) -> Int
    {
        let n = try number(key, default: Double(fallback), min: min.map(Double.init), max: max.map(Double.init))
        guard n == n.rounded(), abs(n) < 9e15 else {
            throw ConfigError(path: child(key), "expected a whole number, got \(n)")
        }
        return Int(n)
    }

    package mutating func choice<T: RawRepresentable>(_ key: String, default fallback: T) throws(ConfigError) -> T
    where T.RawValue == String, T: CaseIterable {
        guard let raw = try optionalString(key) else { return fallback }
        guard let choice = T(rawValue: raw) else {
            let allowed = T.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
            throw ConfigError(path: child(key), "expected one of \(allowed), got \"\(raw)\"")
        }
        return choice
    }

    package mutating func node(_ key: String) throws(ConfigError) -> ConfigNode {
        try ConfigNode(value(key) ?? .object(JSONObject()), path: child(key))
    }

    package mutating func array(_ key: String) throws(ConfigError) -> [JSONValue]? {
        guard let value = value(key) else { return nil }
        guard case .array(let items) = value else {
            throw ConfigError(path: child(key), "expected an array, got \(value.kindName)")
        }
        return items
    }

    /// A secret: a literal string, `{"env": "NAME"}` or `{"file": "/path"}`.
    package mutating func secret(_ key: String) throws(ConfigError) -> Secret? {
        guard let value = value(key) else { return nil }
        let at = child(key)
        switch value {
        case .string(let s): return Secret(.literal(s), path: at)
        case .object:
            var node = try ConfigNode(value, path: at)
            let env = try node.optionalString("env")
            let file = try node.optionalString("file")
            try node.finish()
            switch (env, file) {
            case (let name?, nil): return Secret(.environment(name), path: at)
            case (nil, let path?): return Secret(.file(path), path: at)
            default: throw ConfigError(path: at, "expected exactly one of \"env\" or \"file\"")
            }
        default:
            throw ConfigError(path: at, "expected a string or {\"env\": ...} or {\"file\": ...}, got \(value.kindName)")
        }
    }

    /// Rejects keys nobody read: they are typos or options of another version.
    package func finish() throws(ConfigError) {
        for key in object.keys where !taken.contains(key) {
            throw ConfigError(path: child(key), "unknown key")
        }
    }
}

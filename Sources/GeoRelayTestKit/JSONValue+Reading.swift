import GeoRelayCore

/// Reading a status or answer in a test: `status["devices"]?.array?.first?["name"]?.string`.
extension JSONValue {
    package subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    package var number: Double? {
        if case .number(let n) = self { return n }
        return nil
    }

    package var string: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    package var array: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    package var bool: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }
}

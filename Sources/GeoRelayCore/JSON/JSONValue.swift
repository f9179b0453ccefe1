/// A parsed JSON (or JSON5) value.
///
/// Objects keep their keys in the order they were written: attributes are
/// forwarded in that order, and a duplicate key is detected at parse time.
package enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// A short name of the value's kind, for error messages ("expected a string, got a number").
    package var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// A JSON object: ordered keys, lookup by key.
///
/// The objects georelay reads are small (a position has about ten keys), so a
/// linear scan beats hashing and keeps the order without a second structure.
package struct JSONObject: Sendable, Equatable {
    package var members: [(key: String, value: JSONValue)]

    package init(_ members: [(key: String, value: JSONValue)] = []) {
        self.members = members
    }

    package subscript(key: String) -> JSONValue? {
        for member in members where member.key == key {
            return member.value
        }
        return nil
    }

    package var keys: [String] { members.map(\.key) }

    package static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        lhs.members.count == rhs.members.count
            && zip(lhs.members, rhs.members).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }
}

extension JSONValue {
    /// Serialises the value as compact JSON (used for stored attributes and push bodies).
    package var jsonText: String {
        var out = ""
        write(to: &out)
        return out
    }

    package func write(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let n): out += JSONValue.format(number: n)
        case .string(let s): JSONValue.writeQuoted(s, to: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                item.write(to: &out)
            }
            out += "]"
        case .object(let object):
            out += "{"
            for (i, member) in object.members.enumerated() {
                if i > 0 { out += "," }
                JSONValue.writeQuoted(member.key, to: &out)
                out += ":"
                member.value.write(to: &out)
            }
            out += "}"
        }
    }

    /// Integers print without a fraction so that seconds and counts read naturally.
    package static func format(number n: Double) -> String {
        if n.isFinite, n == n.rounded(), abs(n) < 9.0e15 {
            return String(Int64(n))
        }
        return n.isFinite ? "\(n)" : "null"
    }

    package static func writeQuoted(_ s: String, to out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }
}

/// Why a JSON text could not be parsed, and where.
package struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    package var message: String
    /// Byte offset from the start of the text.
    package var offset: Int
    /// 1-based line and column, for configuration files.
    package var line: Int
    package var column: Int

    package var description: String { "\(message) at line \(line), column \(column)" }
}

/// A strict, allocation-light JSON parser with an optional JSON5 dialect.
///
/// Ingest parses every line of every collector with it, so it works on raw
/// bytes and reports the byte offset of the first problem; the configuration
/// loader uses the JSON5 dialect (comments, unquoted keys, single quotes,
/// trailing commas, hexadecimal and signed numbers) and reports line and column.
/// Foundation's JSON readers give neither the position nor the key order.
package struct JSONParser {
    package struct Options: Sendable {
        package var json5: Bool
        package var maxDepth: Int
        package init(json5: Bool = false, maxDepth: Int = 32) {
            self.json5 = json5
            self.maxDepth = maxDepth
        }
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private let options: Options
    private var index = 0
    private var depth = 0

    private init(bytes: UnsafeBufferPointer<UInt8>, options: Options) {
        self.bytes = bytes
        self.options = options
    }

    /// Parses exactly one value; anything but whitespace (and JSON5 comments) after it is an error.
    package static func parse(_ bytes: UnsafeBufferPointer<UInt8>, options: Options = Options()) throws(JSONParseError)
        -> JSONValue
    {
        var parser = JSONParser(bytes: bytes, options: options)
        try parser.skipWhitespace()
        let value = try parser.parseValue()
        try parser.skipWhitespace()
        if parser.index < bytes.count {
            throw parser.error("unexpected '\(parser.printable(bytes[parser.index]))' after the value")
        }
        return value
    }

    package static func parse(_ text: String, options: Options = Options()) throws(JSONParseError) -> JSONValue {
        var copy = text
        let result: Result<JSONValue, JSONParseError> = copy.withUTF8 { buffer in
            do throws(JSONParseError) {
                return .success(try parse(buffer, options: options))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    // MARK: - Values

    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of input, expected a value") }
        let c = bytes[index]
        switch c {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString(quote: c))
        case UInt8(ascii: "'") where options.json5: return .string(try parseString(quote: c))
        case UInt8(ascii: "t"):
            try expectWord("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectWord("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectWord("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default:
            if options.json5,
                c == UInt8(ascii: "+") || c == UInt8(ascii: ".") || c == UInt8(ascii: "I") || c == UInt8(ascii: "N")
            {
                return .number(try parseNumber())
            }
            throw error("unexpected '\(printable(c))', expected a value")
        }
    }

    private mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > options.maxDepth { throw error("nesting deeper than \(options.maxDepth) levels") }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        index += 1
        var members: [(key: String, value: JSONValue)] = []
        try skipWhitespace()
        if peek(UInt8(ascii: "}")) {
            index += 1
            return .object(JSONObject(members))
        }
        while true {
            try skipWhitespace()
            if options.json5, peek(UInt8(ascii: "}")), !members.isEmpty {
                index += 1
                break
            }
            let keyStart = index
            let key = try parseKey()
            if members.contains(where: { $0.key == key }) {
                index = keyStart
                throw error("duplicate key \"\(key)\"")
            }
            try skipWhitespace()
            guard peek(UInt8(ascii: ":")) else { throw error("expected ':' after key \"\(key)\"") }
            index += 1
            try skipWhitespace()
            let value = try parseValue()
            members.append((key, value))
            try skipWhitespace()
            if peek(UInt8(ascii: ",")) {
                index += 1
                continue
            }
            if peek(UInt8(ascii: "}")) {
                index += 1
                break
            }
            throw error(index < bytes.count ? "expected ',' or '}' in object" : "unexpected end of input in object")
        }
        return .object(JSONObject(members))
    }

    private mutating func parseKey() throws(JSONParseError) -> String {
        guard index < bytes.count else { throw error("unexpected end of input, expected a key") }
        let c = bytes[index]
        if c == UInt8(ascii: "\"") || (options.json5 && c == UInt8(ascii: "'")) {
            return try parseString(quote: c)
        }
        if options.json5, isIdentifierStart(c) {
            let start = index
            while index < bytes.count, isIdentifierStart(bytes[index]) || isDigit(bytes[index]) { index += 1 }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        }
        throw error("expected a quoted key, found '\(printable(c))'")
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        index += 1
        var items: [JSONValue] = []
        try skipWhitespace()
        if peek(UInt8(ascii: "]")) {
            index += 1
            return .array(items)
        }
        while true {
            try skipWhitespace()
            if options.json5, peek(UInt8(ascii: "]")), !items.isEmpty {
                index += 1
                break
            }
            items.append(try parseValue())
            try skipWhitespace()
            if peek(UInt8(ascii: ",")) {
                index += 1
                continue
            }
            if peek(UInt8(ascii: "]")) {
                index += 1
                break
            }
            throw error(index < bytes.count ? "expected ',' or ']' in array" : "unexpected end of input in array")
        }
        return .array(items)
    }

    private mutating func parseString(quote: UInt8) throws(JSONParseError) -> String {
        let start = index
        index += 1
        // Fast path: no escapes.
        var scan = index
        var ascii = true
        while scan < bytes.count {
            let c = bytes[scan]
            if c == quote {
                let s = try utf8String(UnsafeBufferPointer(rebasing: bytes[index..<scan]), ascii: ascii, at: start)
                index = scan + 1
                return s
            }
            if c >= 0x80 { ascii = false }
            if c == UInt8(ascii: "\\") { break }
            if c < 0x20 {
                index = scan
                throw error("control character in string")
            }
            scan += 1
        }
        var out: [UInt8] = Array(bytes[index..<scan])
        index = scan
        while true {
            guard index < bytes.count else {
                index = start
                throw error("unterminated string")
            }
            let c = bytes[index]
            if c == quote {
                index += 1
                break
            }
            if c < 0x20 { throw error("control character in string") }
            if c != UInt8(ascii: "\\") {
                out.append(c)
                index += 1
                continue
            }
            index += 1
            guard index < bytes.count else { throw error("unterminated escape") }
            let e = bytes[index]
            index += 1
            switch e {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
            case UInt8(ascii: "'") where options.json5: out.append(e)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try parseHex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                        bytes[index + 1] == UInt8(ascii: "u")
                    else {
                        throw error("unpaired surrogate in string")
                    }
                    index += 2
                    let low = try parseHex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw error("unpaired surrogate in string") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let u = Unicode.Scalar(scalar) else { throw error("invalid unicode escape") }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default:
                index -= 1
                throw error("invalid escape '\\\(printable(e))'")
            }
        }
        // Through Result: Swift 6.0's withUnsafeBufferPointer only rethrows (`any Error`).
        let result = out.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONParseError) in try utf8String(buffer, ascii: false, at: start) }
        }
        return try result.get()
    }

    /// RFC 8259 requires UTF-8; a line with broken bytes is refused rather than silently repaired
    /// with U+FFFD, so what reaches a server is exactly what the collector meant or nothing.
    private func utf8String(_ bytes: UnsafeBufferPointer<UInt8>, ascii: Bool, at start: Int) throws(JSONParseError)
        -> String
    {
        if ascii { return String(decoding: bytes, as: UTF8.self) }
        guard let s = String(validating: bytes, as: UTF8.self) else {
            var copy = self
            copy.index = start
            throw copy.error("invalid UTF-8 in string")
        }
        return s
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("truncated unicode escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let d = HexDigit.value(bytes[index]) else { throw error("invalid unicode escape") }
            value = value << 4 | UInt32(d)
            index += 1
        }
        return value
    }

    private mutating func parseNumber() throws(JSONParseError) -> Double {
        let start = index
        var negative = false
        if peek(UInt8(ascii: "-")) {
            negative = true
            index += 1
        } else if options.json5, peek(UInt8(ascii: "+")) {
            index += 1
        }
        if options.json5 {
            if matchWord("Infinity") { return negative ? -.infinity : .infinity }
            if matchWord("NaN") { return .nan }
            if index + 1 < bytes.count, bytes[index] == UInt8(ascii: "0"), bytes[index + 1] | 0x20 == UInt8(ascii: "x")
            {
                index += 2
                var value: Double = 0
                let digitsStart = index
                while index < bytes.count, let d = HexDigit.value(bytes[index]) {
                    value = value * 16 + Double(d)
                    index += 1
                }
                if index == digitsStart { throw error("expected hexadecimal digits") }
                return negative ? -value : value
            }
        }
        let intStart = index
        while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        let intDigits = index - intStart
        if intDigits == 0, !(options.json5 && peek(UInt8(ascii: "."))) {
            index = start
            throw error("invalid number")
        }
        if !options.json5, intDigits > 1, bytes[intStart] == UInt8(ascii: "0") {
            index = start
            throw error("invalid number (leading zero)")
        }
        if peek(UInt8(ascii: ".")) {
            index += 1
            let fracStart = index
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            if index == fracStart, !options.json5 || intDigits == 0 { throw error("expected digits after '.'") }
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            index += 1
            if peek(UInt8(ascii: "+")) || peek(UInt8(ascii: "-")) { index += 1 }
            let expStart = index
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            if index == expStart { throw error("expected digits in exponent") }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let value = Double(text.first == "+" ? String(text.dropFirst()) : text) else {
            index = start
            throw error("invalid number")
        }
        return value
    }

    // MARK: - Lexing helpers

    private mutating func skipWhitespace() throws(JSONParseError) {
        while index < bytes.count {
            let c = bytes[index]
            if c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 {
                index += 1
            } else if options.json5, c == UInt8(ascii: "/"), index + 1 < bytes.count {
                if bytes[index + 1] == UInt8(ascii: "/") {
                    while index < bytes.count, bytes[index] != 0x0A { index += 1 }
                } else if bytes[index + 1] == UInt8(ascii: "*") {
                    let start = index
                    index += 2
                    while index + 1 < bytes.count,
                        !(bytes[index] == UInt8(ascii: "*") && bytes[index + 1] == UInt8(ascii: "/"))
                    { index += 1 }
                    if index + 1 >= bytes.count {
                        index = start
                        throw error("unterminated comment")
                    }
                    index += 2
                } else {
                    return
                }
            } else {
                return
            }
        }
    }

    private func peek(_ c: UInt8) -> Bool { index < bytes.count && bytes[index] == c }

    private mutating func matchWord(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        let w = UnsafeBufferPointer(start: word.utf8Start, count: count)
        for i in 0..<count where bytes[index + i] != w[i] { return false }
        index += count
        return true
    }

    private mutating func expectWord(_ word: StaticString) throws(JSONParseError) {
        if !matchWord(word) { throw error("invalid literal, expected \(word)") }
    }

    private func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }

    private func isIdentifierStart(_ c: UInt8) -> Bool {
        (c | 0x20 >= UInt8(ascii: "a") && c | 0x20 <= UInt8(ascii: "z")) || c == UInt8(ascii: "_")
            || c == UInt8(ascii: "$")
    }

    private func printable(_ c: UInt8) -> String {
        c >= 0x20 && c < 0x7F ? String(UnicodeScalar(c)) : "\\x" + String(c, radix: 16)
    }

    private func error(_ message: String) -> JSONParseError {
        var line = 1
        var lineStart = 0
        let end = min(index, bytes.count)
        for i in 0..<end where bytes[i] == 0x0A {
            line += 1
            lineStart = i + 1
        }
        return JSONParseError(message: message, offset: index, line: line, column: end - lineStart + 1)
    }
}

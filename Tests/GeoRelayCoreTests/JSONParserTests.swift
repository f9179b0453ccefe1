import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

@Suite(.offThePool) struct JSONParserTests {
    @Test func parsesNestedValuesInOrder() throws {
        let value = try JSONParser.parse(
            #"{"b": 1, "a": [true, false, null, "x\n\u00e9\ud83d\ude00"], "c": {"d": -1.5e2}}"#)
        guard case .object(let object) = value else {
            Issue.record("not an object")
            return
        }
        #expect(object.keys == ["b", "a", "c"])
        #expect(object["a"] == .array([.bool(true), .bool(false), .null, .string("x\né😀")]))
        #expect(object["c"] == .object(JSONObject([("d", .number(-150))])))
    }

    @Test(arguments: [
        (#"{"a": 1,}"#, "expected a quoted key"),
        (#"{"a" 1}"#, "expected ':'"),
        (#"{"a": 01}"#, "leading zero"),
        (#"{"a": "x"#, "unterminated string"),
        (#"{"a": 1, "a": 2}"#, "duplicate key"),
        (#"[1, 2"#, "unexpected end of input"),
        (#"{"a": tru}"#, "invalid literal"),
        (#"{"a": 1} x"#, "after the value"),
    ])
    func rejectsMalformedJSON(text: String, message: String) {
        #expect {
            try JSONParser.parse(text)
        } throws: { error in
            (error as? JSONParseError)?.message.contains(message) == true
        }
    }

    @Test func acceptsUTF8AndRefusesBrokenBytesInBothStringPaths() throws {
        #expect(try JSONParser.parse(#"["bøye 🛟", "b\\øye"]"#) == .array([.string("bøye 🛟"), .string("b\\øye")]))
        for broken: [UInt8] in [[0xC3, 0x28], [0xFF], [0xED, 0xA0, 0x80], [0xE2, 0x82]] {
            for prefix in [Array("[\"a".utf8), Array("[\"a\\n".utf8)] { // fast path, escape path
                let bytes = prefix + broken + Array("\"]".utf8)
                #expect {
                    try bytes.withUnsafeBufferPointer { buffer in try JSONParser.parse(buffer) }
                } throws: { error in
                    (error as? JSONParseError)?.message.contains("invalid UTF-8 in string") == true
                }
            }
        }
    }

    @Test func reportsLineAndColumn() {
        do {
            _ = try JSONParser.parse("{\n  \"a\": 1,\n  \"b\" 2\n}")
            Issue.record("parsed")
        } catch {
            #expect(error.line == 3)
            #expect(error.column == 7)
        }
    }

    @Test func json5Dialect() throws {
        let text = """
            // comment
            {
              unquoted: 'single',  /* block */
              hex: 0x1F, plus: +3, trailing: [1, 2,],
            }
            """
        let value = try JSONParser.parse(text, options: .init(json5: true))
        guard case .object(let object) = value else {
            Issue.record("not an object")
            return
        }
        #expect(object["unquoted"] == .string("single"))
        #expect(object["hex"] == .number(31))
        #expect(object["plus"] == .number(3))
        #expect(object["trailing"] == .array([.number(1), .number(2)]))
        #expect(throws: JSONParseError.self) { try JSONParser.parse("{a: 1}") }
    }

    @Test func limitsNesting() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(throws: JSONParseError.self) { try JSONParser.parse(deep) }
    }

    @Test func serialisesCompactly() throws {
        let value = try JSONParser.parse(#"{"a":[1,2.5,"q\"uote"],"b":null}"#)
        #expect(value.jsonText == #"{"a":[1,2.5,"q\"uote"],"b":null}"#)
    }
}

@Suite(.offThePool) struct JSONBytesTests {
    @Test(arguments: [
        (59.912345, 7, "59.912345"), (-10.7000001, 7, "-10.7000001"), (5.144444444444445, 3, "5.144"),
        (12.5, 3, "12.5"),
        (3.0, 3, "3"), (-0.0004, 3, "0"), (-0.0006, 3, "-0.001"), (0.05, 3, "0.05"), (1e20, 3, "1e+20"),
        (179.99999999, 7, "180"),
    ])
    func fixedDecimals(value: Double, decimals: Int, expected: String) {
        var out: [UInt8] = []
        JSONBytes.appendFixed(value, decimals: decimals, to: &out)
        #expect(String(decoding: out, as: UTF8.self) == expected)
    }

    @Test func isoTimestampsMatchTheStringForm() {
        for ms in stride(from: Int64(-86_400_000), to: 4_102_444_800_000, by: 7_777_777_777) {
            var out: [UInt8] = []
            JSONBytes.appendISO8601(milliseconds: ms, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == Timestamp.iso8601(milliseconds: ms))
        }
    }
}

import Testing
@testable import GeoRelayCore

@Suite struct JSONParserTests {
    @Test func parsesNestedValuesInOrder() throws {
        let value = try JSONParser.parse(#"{"b": 1, "a": [true, false, null, "x\n\u00e9\ud83d\ude00"], "c": {"d": -1.5e2}}"#)
        guard case .object(let object) = value else { Issue.record("not an object"); return }
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
        guard case .object(let object) = value else { Issue.record("not an object"); return }
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

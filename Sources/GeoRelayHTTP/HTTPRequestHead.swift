/// A request's line and headers, parsed and judged against the listener's limits.
///
/// Strict where leniency lets requests be read two ways (request smuggling: a doubled or
/// malformed `Content-Length`, `Transfer-Encoding`, whitespace before a colon, folded lines),
/// lenient where real phones differ (no `Host`, extra blank lines between pipelined requests).
struct HTTPRequestHead: Sendable {
    var method: String
    var target: String
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    var minorVersion: Int
    var headers: [(String, String)]
    var contentLength: Int
    /// Whether the client wants the connection kept after this request (HTTP/1.1 unless
    /// `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`).
    var keepAlive: Bool
    /// `Expect: 100-continue`: curl waits a second for the interim answer before a large body.
    var expectsContinue: Bool

    /// Parses `bytes`, the head without its final empty line.
    static func parse(_ bytes: ArraySlice<UInt8>, limits: HTTPListener.Limits) throws(HTTPRequestError)
        -> HTTPRequestHead
    {
        var lines: [ArraySlice<UInt8>] = []
        var start = bytes.startIndex
        var index = bytes.startIndex
        while index < bytes.endIndex {
            if bytes[index] == 13 {
                guard index + 1 < bytes.endIndex, bytes[index + 1] == 10 else {
                    throw .badRequest("a CR not followed by LF")
                }
                lines.append(bytes[start..<index])
                index += 2
                start = index
                continue
            }
            if bytes[index] == 10 { throw .badRequest("a bare LF: lines end with CRLF") }
            if bytes[index] == 0 { throw .badRequest("a NUL byte in the head") }
            index += 1
        }
        lines.append(bytes[start..<bytes.endIndex])
        let requestLine = lines.removeFirst()
        guard requestLine.count <= limits.maxRequestLineBytes else {
            throw .uriTooLong("request line of \(requestLine.count) bytes (limit \(limits.maxRequestLineBytes))")
        }
        guard lines.count <= limits.maxHeaderCount else {
            throw .headersTooLarge("\(lines.count) header lines (limit \(limits.maxHeaderCount))")
        }
        let parts = requestLine.split(separator: 32, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, parts[0].allSatisfy(Self.isTokenByte),
            parts[1].allSatisfy({ $0 > 32 && $0 < 127 })
        else {
            throw .badRequest("request line is not METHOD TARGET HTTP/1.x")
        }
        let version = String(decoding: parts[2], as: UTF8.self)
        let minor: Int
        switch version {
        case "HTTP/1.1": minor = 1
        case "HTTP/1.0": minor = 0
        default:
            guard version.hasPrefix("HTTP/") else { throw .badRequest("request line is not METHOD TARGET HTTP/1.x") }
            throw .versionNotSupported("only HTTP/1.0 and HTTP/1.1")
        }

        var head = HTTPRequestHead(
            method: String(decoding: parts[0], as: UTF8.self), target: String(decoding: parts[1], as: UTF8.self),
            minorVersion: minor, headers: [], contentLength: 0, keepAlive: minor == 1, expectsContinue: false)
        var length: Int?
        var connectionClose = false
        var connectionKeepAlive = false
        head.headers.reserveCapacity(lines.count)
        for line in lines {
            guard let first = line.first else { throw .badRequest("an empty header line") }
            if first == 32 || first == 9 { throw .badRequest("a folded header line (obsolete line folding)") }
            guard let colon = line.firstIndex(of: 58) else { throw .badRequest("a header line without a colon") }
            let name = line[line.startIndex..<colon]
            guard !name.isEmpty, name.allSatisfy(Self.isTokenByte) else {
                throw .badRequest("a header name that is not a token")
            }
            var value = line[(colon + 1)...]
            while let byte = value.first, byte == 32 || byte == 9 { value = value.dropFirst() }
            while let byte = value.last, byte == 32 || byte == 9 { value = value.dropLast() }
            let nameText = String(decoding: name, as: UTF8.self)
            let valueText = String(decoding: value, as: UTF8.self)
            head.headers.append((nameText, valueText))
            switch nameText.lowercased() {
            case "content-length":
                guard !value.isEmpty, value.count <= 18, value.allSatisfy({ $0 >= 48 && $0 <= 57 }),
                    let parsed = Int(valueText)
                else {
                    throw .badRequest("a Content-Length that is not a number")
                }
                if let length, length != parsed { throw .badRequest("two different Content-Length headers") }
                length = parsed
            case "transfer-encoding":
                throw .notImplemented("Transfer-Encoding is not supported: send the body with a Content-Length")
            case "connection":
                for token in valueText.lowercased().split(separator: ",") {
                    let option = token.filter { $0 != " " && $0 != "\t" }
                    if option == "close" { connectionClose = true }
                    if option == "keep-alive" { connectionKeepAlive = true }
                }
            case "expect":
                guard valueText.lowercased() == "100-continue" else {
                    throw .expectationFailed("an Expect other than 100-continue")
                }
                head.expectsContinue = true
            default:
                break
            }
        }
        head.contentLength = length ?? 0
        guard head.contentLength <= limits.maxBodyBytes else {
            throw .payloadTooLarge("a body of \(head.contentLength) bytes (limit \(limits.maxBodyBytes))")
        }
        head.keepAlive = !connectionClose && (minor == 1 || connectionKeepAlive)
        return head
    }

    /// RFC 9110's `tchar`: what a method or a header name may be made of.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 48...57, 65...90, 97...122: return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
            UInt8(ascii: "'"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"),
            UInt8(ascii: "_"),
            UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default: return false
        }
    }
}

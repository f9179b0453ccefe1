import GeoRelayCore

/// Why a destination URL or a request could not be framed. The description is short and fixed,
/// safe for logs (it does not echo the URL, which may carry a device's identity).
package struct HTTP1RequestError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Sendable, Hashable {
        case scheme, userInfo, host, port, target, method, headerName, headerValue, reservedHeader
    }

    private let code: Code
    private init(_ code: Code) { self.code = code }

    /// Not `http://` or `https://`.
    package static let unsupportedScheme = Self(.scheme)
    /// `user:password@` in the URL with a bad `%` escape.
    package static let userInfoInURL = Self(.userInfo)
    /// Empty, or not a DNS name, an IPv4 address or a bracketed IPv6 address.
    package static let invalidHost = Self(.host)
    /// Not a number from 1 to 65535.
    package static let invalidPort = Self(.port)
    /// A path or query with characters that must be percent-encoded, or a bad `%` escape.
    package static let invalidTarget = Self(.target)
    /// A method that is not a token.
    package static let invalidMethod = Self(.method)
    /// A header name that is not a token.
    package static let invalidHeaderName = Self(.headerName)
    /// A header value with CR, LF or other control characters: would split the request.
    package static let invalidHeaderValue = Self(.headerValue)
    /// Host, Content-Length or Transfer-Encoding given as a header: the framing sets those itself.
    package static let reservedHeader = Self(.reservedHeader)

    package var description: String {
        switch code {
        case .scheme: "URL scheme is not http or https"
        case .userInfo: "invalid credentials in URL"
        case .host: "invalid host in URL"
        case .port: "invalid port in URL"
        case .target: "invalid path or query in URL"
        case .method: "invalid HTTP method"
        case .headerName: "invalid HTTP header name"
        case .headerValue: "invalid HTTP header value"
        case .reservedHeader: "Host, Content-Length and Transfer-Encoding are set by the framing"
        }
    }
}

/// Where a destination URL's requests go: the `Host` header and the origin-form request target.
///
/// Parsed and checked once, when the destination is set up, so that framing a request is a copy.
/// The fragment is dropped (it is never sent); a URL without a path targets `/`.
package struct HTTP1Target: Sendable, Hashable {
    /// `host` or `host:port`; the port only when it is not the scheme's default (bytes count on a satellite link).
    package var hostHeader: String
    /// `/path?query`, exactly as written in the URL (already percent-encoded).
    package var target: String
    package var isTLS: Bool
    /// The host as in the URL (an IPv6 address keeps its brackets).
    package var host: String
    package var port: Int
    /// `Basic …` for `user:password@` in the URL, as libcurl sends it (percent-decoded, then
    /// base64), or nil. A secret: it goes in the `Authorization` header and nowhere else.
    package var authorization: String?

    /// - Throws: `HTTP1RequestError` for anything but `http(s)://host[:port][/path][?query][#fragment]`
    ///   with a valid host, port and path; user info is refused.
    package init(url: String) throws(HTTP1RequestError) {
        let bytes = Array(url.utf8)
        let afterScheme: Int
        if Self.hasPrefix(bytes, "http://") {
            isTLS = false
            afterScheme = 7
        } else if Self.hasPrefix(bytes, "https://") {
            isTLS = true
            afterScheme = 8
        } else {
            throw .unsupportedScheme
        }
        var authorityEnd = afterScheme
        while authorityEnd < bytes.count, !"/?#".utf8.contains(bytes[authorityEnd]) { authorityEnd += 1 }
        var authority = bytes[afterScheme..<authorityEnd]
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) {
            guard let credentials = Self.percentDecoded(authority[..<at]) else { throw .userInfoInURL }
            authorization = "Basic " + Base64.encode(credentials)
            authority = authority[(at + 1)...]
        }

        // Host, then an optional ":port".
        var hostEnd: Int
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")), close > authority.startIndex + 1,
                authority[(authority.startIndex + 1)..<close].allSatisfy({
                    HexDigit.value($0) != nil || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".")
                }),
                authority[(authority.startIndex + 1)..<close].contains(UInt8(ascii: ":"))
            else { throw .invalidHost }
            hostEnd = close + 1
            guard hostEnd == authority.endIndex || authority[hostEnd] == UInt8(ascii: ":") else { throw .invalidHost }
        } else {
            hostEnd = authority.firstIndex(of: UInt8(ascii: ":")) ?? authority.endIndex
            let name = authority[authority.startIndex..<hostEnd]
            guard !name.isEmpty, name.allSatisfy(Self.isHostNameByte), name.first != UInt8(ascii: "-") else {
                throw .invalidHost
            }
        }
        host = String(decoding: authority[authority.startIndex..<hostEnd], as: UTF8.self)
        let defaultPort = isTLS ? 443 : 80
        if hostEnd < authority.endIndex {
            let digits = authority[(hostEnd + 1)...]
            guard (1...5).contains(digits.count),
                digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
            else { throw .invalidPort }
            let value = digits.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
            guard (1...65535).contains(value) else { throw .invalidPort }
            port = value
        } else {
            port = defaultPort
        }
        hostHeader = port == defaultPort ? host : "\(host):\(port)"

        // Path and query, up to the fragment.
        var targetEnd = authorityEnd
        while targetEnd < bytes.count, bytes[targetEnd] != UInt8(ascii: "#") { targetEnd += 1 }
        let rest = bytes[authorityEnd..<targetEnd]
        guard Self.isValidTarget(rest) else { throw .invalidTarget }
        target = (rest.first == UInt8(ascii: "/") ? "" : "/") + String(decoding: rest, as: UTF8.self)
    }

    /// `bytes` with each `%XX` decoded; nil for a bad escape.
    private static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
        var decoded: [UInt8] = []
        var i = bytes.startIndex
        while i < bytes.endIndex {
            guard bytes[i] == UInt8(ascii: "%") else {
                decoded.append(bytes[i])
                i += 1
                continue
            }
            guard i + 2 < bytes.endIndex, let high = HexDigit.value(bytes[i + 1]),
                let low = HexDigit.value(bytes[i + 2])
            else { return nil }
            decoded.append(high << 4 | low)
            i += 3
        }
        return decoded
    }

    /// Whether `bytes` start with the lowercase `prefix`, ignoring the case of letters (schemes are case-insensitive).
    private static func hasPrefix(_ bytes: [UInt8], _ prefix: String) -> Bool {
        bytes.count >= prefix.utf8.count
            && zip(bytes, prefix.utf8).allSatisfy { byte, expected in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 == expected : byte == expected
            }
    }

    /// A DNS name or IPv4 address: letters, digits, `-`, `.`, `_`, `~` (no percent-encoded names).
    private static func isHostNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            true
        default:
            false
        }
    }

    /// RFC 3986 path and query characters: unreserved, sub-delims, `:`, `@`, `/`, `?`, and `%XX`.
    static func isValidTarget(_ bytes: ArraySlice<UInt8>) -> Bool {
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let byte = bytes[i]
            if byte == UInt8(ascii: "%") {
                guard i + 2 < bytes.endIndex, HexDigit.value(bytes[i + 1]) != nil, HexDigit.value(bytes[i + 2]) != nil
                else { return false }
                i += 3
                continue
            }
            // Unreserved (the host name's bytes), then sub-delims, `:`, `@`, `/` and `?`.
            guard isHostNameByte(byte) || "!$&'()*+,;=:@/?".utf8.contains(byte) else { return false }
            i += 1
        }
        return true
    }

}

/// The requests of one destination, framed by hand for a pipelined connection: the request line,
/// `Host` and the fixed headers are checked and laid out once; `append(body:to:)` adds one request
/// (that head, `Content-Length` and the body) to an output buffer.
///
/// Minimal on purpose: no `User-Agent`, `Accept` or `Expect`, since every byte is paid for on a
/// satellite link. `Content-Length` is always sent, except for a `GET` or `HEAD` without a body.
package struct HTTP1Request: Sendable {
    /// `METHOD target HTTP/1.1`, `Host` and the headers, each line with its CRLF.
    private let head: [UInt8]
    private let omitsEmptyLength: Bool

    /// - Parameter headers: sent in this order on every request; Host, Content-Length and
    ///   Transfer-Encoding are refused (the framing owns them).
    package init(method: String = "POST", target: HTTP1Target, headers: [(String, String)] = [])
        throws(HTTP1RequestError)
    {
        guard !method.isEmpty, method.utf8.allSatisfy(HTTP1ResponseParser.isTokenByte) else { throw .invalidMethod }
        var head = Array("\(method) \(target.target) HTTP/1.1\r\nHost: \(target.hostHeader)\r\n".utf8)
        // The URL's credentials, unless a header of the caller's says who it is (a push token).
        if let authorization = target.authorization,
            !headers.contains(where: { HTTPResponse.sameName($0.0, "authorization") })
        {
            head.append(contentsOf: "Authorization: \(authorization)\r\n".utf8)
        }
        for (name, value) in headers {
            guard !name.isEmpty, name.utf8.allSatisfy(HTTP1ResponseParser.isTokenByte) else { throw .invalidHeaderName }
            guard value.utf8.allSatisfy(HTTP1ResponseParser.isFieldValueByte) else { throw .invalidHeaderValue }
            for reserved in ["host", "content-length", "transfer-encoding"] where HTTPResponse.sameName(name, reserved)
            {
                throw .reservedHeader
            }
            head.append(contentsOf: "\(name): \(value)\r\n".utf8)
        }
        self.head = head
        omitsEmptyLength = method == "GET" || method == "HEAD"
    }

    /// Appends one request carrying `body` to `buffer`.
    /// - Returns: the bytes appended, which is what the request costs on the wire (before TLS).
    @discardableResult
    package func append(body: some Collection<UInt8>, to buffer: inout [UInt8]) -> Int {
        let start = buffer.count
        buffer.append(contentsOf: head)
        let count = body.count
        if count == 0, omitsEmptyLength {
            buffer.append(contentsOf: "\r\n".utf8)
            return buffer.count - start
        }
        buffer.append(contentsOf: "Content-Length: ".utf8)
        buffer.append(contentsOf: String(count).utf8)
        buffer.append(contentsOf: "\r\n\r\n".utf8)
        buffer.append(contentsOf: body)
        return buffer.count - start
    }

    /// Appends one request without a body to `buffer`.
    @discardableResult
    package func append(to buffer: inout [UInt8]) -> Int {
        append(body: EmptyCollection<UInt8>(), to: &buffer)
    }
}

/// RFC 4648 base64, for HTTP Basic credentials.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let chunk = bytes[i..<min(i + 3, bytes.count)]
            let value = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (16 - 8 * UInt32($1.offset)) }
            for digit in 0..<4 {
                out.append(
                    digit <= chunk.count ? alphabet[Int(value >> (18 - 6 * UInt32(digit)) & 63)] : UInt8(ascii: "="))
            }
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}

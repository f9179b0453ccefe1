import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

struct GoodURL: Sendable, CustomTestStringConvertible {
    var url: String
    var hostHeader: String
    var target: String
    var isTLS: Bool
    var port: Int
    var testDescription: String { url }

    static let all: [GoodURL] = [
        .init(
            url: "http://traccar.example:5055/", hostHeader: "traccar.example:5055", target: "/", isTLS: false,
            port: 5055),
        .init(
            url: "http://traccar.example:5055", hostHeader: "traccar.example:5055", target: "/", isTLS: false,
            port: 5055),
        .init(
            url: "http://127.0.0.1:8080/osmand?key=a%20b&x=1", hostHeader: "127.0.0.1:8080",
            target: "/osmand?key=a%20b&x=1", isTLS: false, port: 8080),
        .init(url: "http://h.example?id=1", hostHeader: "h.example", target: "/?id=1", isTLS: false, port: 80),
        .init(url: "http://h.example:80/a", hostHeader: "h.example", target: "/a", isTLS: false, port: 80),
        .init(url: "https://h.example/a/b;c=d", hostHeader: "h.example", target: "/a/b;c=d", isTLS: true, port: 443),
        .init(url: "HTTPS://H.example:443/", hostHeader: "H.example", target: "/", isTLS: true, port: 443),
        .init(
            url: "https://h.example:8443/p#fragment", hostHeader: "h.example:8443", target: "/p", isTLS: true,
            port: 8443),
        .init(url: "http://[::1]:5055/", hostHeader: "[::1]:5055", target: "/", isTLS: false, port: 5055),
        .init(url: "https://[2001:db8::1]/", hostHeader: "[2001:db8::1]", target: "/", isTLS: true, port: 443),
    ]
}

@Suite(.offThePool) struct HTTP1RequestTests {

    @Test(arguments: GoodURL.all)
    func parsesADestinationURL(_ good: GoodURL) throws {
        let target = try HTTP1Target(url: good.url)
        #expect(target.hostHeader == good.hostHeader)
        #expect(target.target == good.target)
        #expect(target.isTLS == good.isTLS)
        #expect(target.port == good.port)
    }

    @Test(arguments: [
        ("ftp://h.example/", HTTP1RequestError.unsupportedScheme),
        ("h.example:5055", .unsupportedScheme),
        ("http:/h.example/", .unsupportedScheme),
        ("http://", .invalidHost),
        ("http:///path", .invalidHost),
        ("http://:5055/", .invalidHost),
        ("http://user:p%zz@h.example/", .userInfoInURL),
        ("http://h ex.example/", .invalidHost),
        ("http://-h.example/", .invalidHost),
        ("http://h%41.example/", .invalidHost),
        ("http://[::1/", .invalidHost),
        ("http://[]/", .invalidHost),
        ("http://[::1]x/", .invalidHost),
        ("http://h.example:/", .invalidPort),
        ("http://h.example:0/", .invalidPort),
        ("http://h.example:65536/", .invalidPort),
        ("http://h.example:123456/", .invalidPort),
        ("http://h.example:80a/", .invalidPort),
        ("http://h.example/a b", .invalidTarget),
        ("http://h.example/a\r\nX-Evil: 1", .invalidTarget),
        ("http://h.example/%zz", .invalidTarget),
        ("http://h.example/%4", .invalidTarget),
        ("http://h.example/caf\u{E9}", .invalidTarget),
        ("http://h.example/a\"b", .invalidTarget),
    ])
    func refusesABadURL(url: String, error: HTTP1RequestError) {
        #expect(throws: error) { _ = try HTTP1Target(url: url) }
    }

    /// `user:password@` in the URL goes as libcurl sends it: percent-decoded, in a Basic
    /// `Authorization` header on every request (a proxy's, since Traccar asks for none), and a
    /// header of the caller's (a push token) wins over it.
    @Test func credentialsInTheURLGoInAnAuthorizationHeader() throws {
        let target = try HTTP1Target(url: "http://us%65r:p%40ss:w@traccar.example:5055/osmand")
        #expect(target.hostHeader == "traccar.example:5055")
        #expect(target.target == "/osmand")
        #expect(target.authorization == "Basic dXNlcjpwQHNzOnc=", "base64 of user:p@ss:w")
        var framed: [UInt8] = []
        try HTTP1Request(method: "GET", target: target).append(to: &framed)
        #expect(
            String(decoding: framed, as: UTF8.self)
                == "GET /osmand HTTP/1.1\r\nHost: traccar.example:5055\r\nAuthorization: Basic dXNlcjpwQHNzOnc=\r\n\r\n"
        )
        framed.removeAll()
        try HTTP1Request(target: target, headers: [("authorization", "Bearer t")]).append(to: &framed)
        #expect(String(decoding: framed, as: UTF8.self).contains("authorization: Bearer t\r\n"))
        #expect(!String(decoding: framed, as: UTF8.self).contains("Basic"))
        var osmAnd: [UInt8] = []
        _ = TraccarProtocol.PipelinedFraming(target: target).appendCanary(to: &osmAnd)
        #expect(String(decoding: osmAnd, as: UTF8.self).contains("\r\nAuthorization: Basic dXNlcjpwQHNzOnc=\r\n\r\n"))
        #expect(
            Base64.encode([]) == "" && Base64.encode(Array("a".utf8)) == "YQ=="
                && Base64.encode(Array("ab".utf8)) == "YWI=")
    }

    @Test func framesAPostWithHeadersAndBody() throws {
        let request = try HTTP1Request(
            method: "POST", target: HTTP1Target(url: "http://127.0.0.1:5055/"),
            headers: [("Content-Type", "application/x-www-form-urlencoded")])
        var buffer: [UInt8] = Array("previous".utf8)
        let added = request.append(body: Array("id=a&lat=1".utf8), to: &buffer)
        let expected =
            "POST / HTTP/1.1\r\nHost: 127.0.0.1:5055\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            + "Content-Length: 10\r\n\r\nid=a&lat=1"
        #expect(String(decoding: buffer, as: UTF8.self) == "previous" + expected)
        #expect(added == expected.utf8.count)
    }

    @Test(arguments: [0, 1, 9, 10, 99, 100, 12345, 1_000_000])
    func writesTheContentLength(count: Int) throws {
        let request = try HTTP1Request(target: HTTP1Target(url: "https://h.example/p"))
        var buffer: [UInt8] = []
        request.append(body: [UInt8](repeating: UInt8(ascii: "x"), count: count), to: &buffer)
        let head = "POST /p HTTP/1.1\r\nHost: h.example\r\nContent-Length: \(count)\r\n\r\n"
        #expect(Array(buffer.prefix(head.utf8.count)) == Array(head.utf8))
        #expect(buffer.count == head.utf8.count + count)
    }

    @Test func aGetWithoutBodyHasNoLength() throws {
        let request = try HTTP1Request(method: "GET", target: HTTP1Target(url: "http://h.example:8082/api/server"))
        var buffer: [UInt8] = []
        request.append(to: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self) == "GET /api/server HTTP/1.1\r\nHost: h.example:8082\r\n\r\n")
        // A POST says it has no body.
        var post: [UInt8] = []
        try HTTP1Request(target: HTTP1Target(url: "http://h.example/")).append(to: &post)
        #expect(
            String(decoding: post, as: UTF8.self) == "POST / HTTP/1.1\r\nHost: h.example\r\nContent-Length: 0\r\n\r\n")
    }

    @Test(arguments: [
        ("POST", "Content-Length", "5", HTTP1RequestError.reservedHeader),
        ("POST", "host", "evil.example", .reservedHeader),
        ("POST", "Transfer-Encoding", "chunked", .reservedHeader),
        ("POST", "Bad Name", "x", .invalidHeaderName),
        ("POST", "", "x", .invalidHeaderName),
        ("POST", "X-A", "a\r\nX-Evil: 1", .invalidHeaderValue),
        ("POST", "X-A", "a\u{0}", .invalidHeaderValue),
        ("PO ST", "X-A", "a", .invalidMethod),
        ("", "X-A", "a", .invalidMethod),
    ])
    func refusesHeadersThatWouldBreakTheFraming(method: String, name: String, value: String, error: HTTP1RequestError)
        throws
    {
        let target = try HTTP1Target(url: "http://h.example/")
        #expect(throws: error) { _ = try HTTP1Request(method: method, target: target, headers: [(name, value)]) }
    }

    /// Requests appended one after another are exactly their concatenation (pipelining), and the
    /// sizes returned add up to what was written.
    @Test func framedRequestsAreBackToBack() throws {
        let request = try HTTP1Request(target: HTTP1Target(url: "http://h.example/"))
        var buffer: [UInt8] = []
        var sizes: [Int] = []
        for n in 0..<3 { sizes.append(request.append(body: Array("n=\(n)".utf8), to: &buffer)) }
        #expect(sizes.reduce(0, +) == buffer.count)
        let text = String(decoding: buffer, as: UTF8.self)
        #expect(
            text == (0..<3).map { "POST / HTTP/1.1\r\nHost: h.example\r\nContent-Length: 3\r\n\r\nn=\($0)" }.joined())
    }
}

import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// A response the parser must take, and what it must make of it.
struct GoodResponse: Sendable, CustomTestStringConvertible {
    var name: String
    var wire: [UInt8]
    var status: Int
    var body: String = ""
    var keepAlive = true
    /// Headers that must be there, with these values (names looked up case-insensitively).
    var headers: [(String, String)] = []
    /// The body runs until the connection closes: complete only after `finish()`.
    var closeDelimited = false

    var testDescription: String { name }

    init(
        _ name: String, _ wire: String, status: Int, body: String = "", keepAlive: Bool = true,
        headers: [(String, String)] = [], closeDelimited: Bool = false
    ) {
        self.name = name
        self.wire = Array(wire.utf8)
        self.status = status
        self.body = body
        self.keepAlive = keepAlive
        self.headers = headers
        self.closeDelimited = closeDelimited
    }

    static let all: [GoodResponse] = [
        .init("empty 200", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", status: 200),
        .init(
            "Content-Length body", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
            status: 200, body: "hello", headers: [("content-type", "text/plain")]),
        .init("empty reason after the space", "HTTP/1.1 400 \r\nContent-Length: 0\r\n\r\n", status: 400),
        .init("no reason, no space", "HTTP/1.1 404\r\nContent-Length: 3\r\n\r\nnot", status: 404, body: "not"),
        .init(
            "names any case, OWS trimmed",
            "HTTP/1.1 200 OK\r\ncOnTeNt-LeNgTh: \t 3 \t\r\nX-Thing:\tb  c \r\nX-Empty:\r\n\r\nabc",
            status: 200, body: "abc", headers: [("X-THING", "b  c"), ("x-empty", "")]),
        .init(
            "obs-text in a value", "HTTP/1.1 200 Ok\r\nX-Name: caf\u{E9}\r\nContent-Length: 0\r\n\r\n",
            status: 200, headers: [("x-name", "caf\u{E9}")]),
        .init(
            "chunked with extensions",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1 ; q=\"x y\"\r\n world\r\n0\r\n\r\n",
            status: 200, body: "hello world"),
        .init(
            "chunked, any case, upper hex, trailers",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\nA\r\n0123456789\r\n00\r\nX-Checksum: 1\r\nX-More: 2\r\n\r\n",
            status: 200, body: "0123456789"),
        .init("chunked, empty", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 200),
        .init(
            "chunked, empty list elements ignored",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: , chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
            status: 200, body: "x"),
        .init(
            "100 Continue skipped", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            status: 200, body: "ok"),
        .init(
            "103 Early Hints skipped, its headers too",
            "HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
            status: 201),
        .init("204 has no body", "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", status: 204, headers: [("x-a", "1")]),
        .init(
            "304 has no body whatever its length says", "HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n",
            status: 304),
        .init(
            "Connection: close",
            "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 5\r\nContent-Length: 0\r\n\r\n",
            status: 503, keepAlive: false, headers: [("retry-after", "5")]),
        .init(
            "close among other tokens", "HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n",
            status: 200, keepAlive: false),
        .init(
            "HTTP/1.0 closes by default", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", status: 200, body: "x",
            keepAlive: false),
        .init(
            "HTTP/1.0 with keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\ny",
            status: 200, body: "y"),
        .init(
            "equal duplicate lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
            status: 200, body: "abc"),
        .init("equal length list", "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc", status: 200, body: "abc"),
        .init(
            "leading zeros in the length", "HTTP/1.1 200 OK\r\nContent-Length: 0003\r\n\r\nabc", status: 200,
            body: "abc"),
        .init(
            "body holding CRLFs and a status line",
            "HTTP/1.1 200 OK\r\nContent-Length: 23\r\n\r\n\r\nHTTP/1.1 500 Oops\r\n\r\n",
            status: 200, body: "\r\nHTTP/1.1 500 Oops\r\n\r\n"),
        .init(
            "body until close", "HTTP/1.1 200 OK\r\nServer: old\r\n\r\nuntil the end\r\n", status: 200,
            body: "until the end\r\n",
            keepAlive: false, closeDelimited: true),
        .init("empty body until close", "HTTP/1.1 200 OK\r\n\r\n", status: 200, keepAlive: false, closeDelimited: true),
    ]
}

/// Bytes the parser must refuse, and the error it must give (never a response, never a wait
/// that would not end: `finish()` ends every input).
struct BadResponse: Sendable, CustomTestStringConvertible {
    var name: String
    var wire: [UInt8]
    var error: HTTP1ParseError
    var maxHeaderBytes = 64 * 1024
    var maxBodyBytes = 1 << 20

    var testDescription: String { name }

    init(
        _ name: String, _ wire: String, _ error: HTTP1ParseError, maxHeaderBytes: Int = 64 * 1024,
        maxBodyBytes: Int = 1 << 20
    ) {
        self.name = name
        self.wire = Array(wire.utf8)
        self.error = error
        self.maxHeaderBytes = maxHeaderBytes
        self.maxBodyBytes = maxBodyBytes
    }

    init(_ name: String, bytes: [UInt8], _ error: HTTP1ParseError) {
        self.name = name
        self.wire = bytes
        self.error = error
    }

    static let all: [BadResponse] = [
        // Status lines.
        .init("HTTP/2", "HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("HTTP/1.2", "HTTP/1.2 200 OK\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("lowercase version", "http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("two-digit status", "HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("four-digit status", "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("status below 100", "HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("status above 599", "HTTP/1.1 600 High\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("no space after the status", "HTTP/1.1 200OK\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("two spaces before the status", "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("control byte in the reason", "HTTP/1.1 200 O\u{1}K\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("empty line first", "\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", .malformedStatusLine),
        .init("bare garbage", "<html>hello</html>", .malformedStatusLine),
        .init(
            "a TLS alert on a plain connection", bytes: [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28], .malformedStatusLine
        ),
        .init(
            "101 Switching Protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n",
            .unexpectedSwitchingProtocols),
        // Line endings.
        .init("CR without LF in the status line", "HTTP/1.1 200 OK\rContent-Length: 0\r\n\r\n", .invalidLineEnding),
        .init(
            "CR without LF in a header", "HTTP/1.1 200 OK\r\nX-A: 1\r2\r\nContent-Length: 0\r\n\r\n", .invalidLineEnding
        ),
        .init("bare LF line endings", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", .invalidLineEnding),
        .init("LF ending the header section", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\n", .invalidLineEnding),
        // Header fields.
        .init(
            "obs-fold with a space", "HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\nContent-Length: 0\r\n\r\n",
            .obsoleteLineFolding),
        .init(
            "obs-fold with a tab", "HTTP/1.1 200 OK\r\nX-A: b\r\n\tc\r\nContent-Length: 0\r\n\r\n", .obsoleteLineFolding
        ),
        .init("space in a name", "HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n", .malformedHeaderField),
        .init("space before the colon", "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", .malformedHeaderField),
        .init("empty name", "HTTP/1.1 200 OK\r\n: x\r\nContent-Length: 0\r\n\r\n", .malformedHeaderField),
        .init("no colon", "HTTP/1.1 200 OK\r\nNoColon\r\nContent-Length: 0\r\n\r\n", .malformedHeaderField),
        .init("NUL in a value", "HTTP/1.1 200 OK\r\nX-A: a\u{0}b\r\nContent-Length: 0\r\n\r\n", .malformedHeaderField),
        .init("DEL in a value", "HTTP/1.1 200 OK\r\nX-A: a\u{7F}b\r\nContent-Length: 0\r\n\r\n", .malformedHeaderField),
        // Content-Length.
        .init("letters for a length", "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", .invalidContentLength),
        .init("negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", .invalidContentLength),
        .init("signed length", "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nabcde", .invalidContentLength),
        .init("hex length", "HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n", .invalidContentLength),
        .init("empty length", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", .invalidContentLength),
        .init("two numbers in one length", "HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n", .invalidContentLength),
        .init("trailing comma in a length", "HTTP/1.1 200 OK\r\nContent-Length: 3,\r\n\r\nabc", .invalidContentLength),
        .init(
            "overflowing length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            .invalidContentLength),
        .init(
            "conflicting duplicate lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            .conflictingContentLength),
        .init(
            "conflicting length list", "HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\nabcd", .conflictingContentLength),
        // Transfer-Encoding.
        .init(
            "length and chunked", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            .contentLengthWithTransferEncoding),
        .init(
            "chunked and length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
            .contentLengthWithTransferEncoding),
        .init("gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", .unsupportedTransferCoding),
        .init(
            "gzip, chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            .unsupportedTransferCoding),
        .init(
            "chunked twice",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            .unsupportedTransferCoding),
        .init(
            "chunked, then another coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
            .unsupportedTransferCoding),
        .init("empty Transfer-Encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n", .unsupportedTransferCoding),
        .init(
            "chunked in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            .unsupportedTransferCoding),
        // Limits.
        .init(
            "header section over the limit",
            "HTTP/1.1 200 OK\r\nX-A: \(String(repeating: "a", count: 100))\r\nContent-Length: 0\r\n\r\n",
            .headerSectionTooLarge, maxHeaderBytes: 64),
        .init(
            "many small headers over the limit",
            "HTTP/1.1 200 OK\r\n\(String(repeating: "X: y\r\n", count: 20))Content-Length: 0\r\n\r\n",
            .headerSectionTooLarge, maxHeaderBytes: 64),
        .init(
            "an endless line", "HTTP/1.1 200 OK\r\nX-A: \(String(repeating: "a", count: 200))", .headerSectionTooLarge,
            maxHeaderBytes: 64),
        .init(
            "length over the limit", "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n0123456789a", .bodyTooLarge,
            maxBodyBytes: 10),
        .init("default body limit", "HTTP/1.1 200 OK\r\nContent-Length: 1048577\r\n\r\n", .bodyTooLarge),
        .init(
            "chunks over the limit",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n8\r\n01234567\r\n0\r\n\r\n",
            .bodyTooLarge, maxBodyBytes: 10),
        .init("body until close over the limit", "HTTP/1.1 200 OK\r\n\r\n0123456789a", .bodyTooLarge, maxBodyBytes: 10),
        .init(
            "chunk line over the limit",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;\(String(repeating: "x", count: 100))\r\na\r\n0\r\n\r\n",
            .headerSectionTooLarge, maxHeaderBytes: 64),
        // Chunks.
        .init("non-hex chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", .malformedChunk),
        .init(
            "negative chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
            .malformedChunk),
        .init("empty chunk size line", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", .malformedChunk),
        .init(
            "overflowing chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFF\r\n",
            .malformedChunk),
        .init(
            "junk after the chunk size",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\nhello\r\n0\r\n\r\n", .malformedChunk),
        .init(
            "chunk data longer than its size",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n", .malformedChunk),
        .init(
            "chunk data without its CRLF",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\rX0\r\n\r\n", .malformedChunk),
        .init(
            "malformed trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n",
            .malformedHeaderField),
        // Closed too early.
        .init("closed inside the status line", "HTTP/1.1 200 O", .truncatedResponse),
        .init("closed inside the headers", "HTTP/1.1 200 OK\r\nContent-", .truncatedResponse),
        .init("closed before the end of the headers", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", .truncatedResponse),
        .init(
            "closed inside a Content-Length body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            .truncatedResponse),
        .init(
            "closed inside a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", .truncatedResponse
        ),
        .init(
            "closed before the last chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
            .truncatedResponse),
        .init(
            "closed inside the trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-A: 1\r\n",
            .truncatedResponse),
        .init("closed after a 100 Continue", "HTTP/1.1 100 Continue\r\n\r\n", .truncatedResponse),
        .init("closed after a lone CR", "HTTP/1.1 200 OK\r", .truncatedResponse),
    ]
}

@Suite(.offThePool) struct HTTP1ResponseParserTests {

    /// Feeds `wire` in pieces of `step` bytes (0: all at once), taking responses as they complete,
    /// then closes. The error, if any, ends it.
    static func parse(_ wire: [UInt8], step: Int = 0, maxHeaderBytes: Int = 64 * 1024, maxBodyBytes: Int = 1 << 20)
        -> (responses: [HTTP1Response], error: HTTP1ParseError?, responsesBeforeClose: Int)
    {
        var parser = HTTP1ResponseParser(maxHeaderBytes: maxHeaderBytes, maxBodyBytes: maxBodyBytes)
        var responses: [HTTP1Response] = []
        do throws(HTTP1ParseError) {
            var offset = 0
            repeat {
                let end = step == 0 ? wire.count : min(wire.count, offset + step)
                parser.append(Array(wire[offset..<end]))
                offset = end
                while let response = try parser.next() { responses.append(response) }
            } while offset < wire.count
            let beforeClose = responses.count
            while let response = try parser.finish() { responses.append(response) }
            #expect(parser.bufferedBytes == 0)
            return (responses, nil, beforeClose)
        } catch {
            return (responses, error, responses.count)
        }
    }

    static func check(_ response: HTTP1Response, against good: GoodResponse, _ context: String) {
        #expect(response.response.status == good.status, "\(context)")
        #expect(String(decoding: response.response.body, as: UTF8.self) == good.body, "\(context)")
        #expect(response.keepAlive == good.keepAlive, "\(context)")
        for (name, value) in good.headers {
            #expect(response.response.header(name) == value, "\(context): \(name)")
        }
    }

    @Test(arguments: GoodResponse.all)
    func takesAGoodResponseWhole(_ good: GoodResponse) throws {
        let result = Self.parse(good.wire)
        #expect(result.error == nil)
        let response = try #require(result.responses.first)
        #expect(result.responses.count == 1)
        #expect(result.responsesBeforeClose == (good.closeDelimited ? 0 : 1), "complete only when it should be")
        Self.check(response, against: good, "whole")
        #expect(response.response.wireBytes == good.wire.count)
    }

    @Test(arguments: GoodResponse.all)
    func takesAGoodResponseByteByByte(_ good: GoodResponse) throws {
        let result = Self.parse(good.wire, step: 1)
        #expect(result.error == nil)
        let response = try #require(result.responses.first)
        #expect(result.responses.count == 1)
        #expect(result.responsesBeforeClose == (good.closeDelimited ? 0 : 1))
        Self.check(response, against: good, "byte by byte")
        #expect(response.response.wireBytes == good.wire.count)
    }

    /// The good responses back to back, as pipelined requests get them, in pieces of several sizes
    /// (one close-delimited response may only come last).
    @Test(arguments: [0, 1, 2, 7, 64, 1000])
    func takesAPipelinedStreamInOrder(step: Int) throws {
        let keptAlive = GoodResponse.all.filter { !$0.closeDelimited }
        let last = try #require(GoodResponse.all.first { $0.closeDelimited && !$0.body.isEmpty })
        let cases = keptAlive + keptAlive + [last]
        let stream = cases.flatMap(\.wire)
        let result = Self.parse(stream, step: step)
        #expect(result.error == nil)
        try #require(result.responses.count == cases.count)
        for (response, good) in zip(result.responses, cases) {
            Self.check(response, against: good, "\(good.name) in a stream, step \(step)")
            #expect(response.response.wireBytes == good.wire.count, "\(good.name)")
        }
        #expect(result.responses.map(\.response.wireBytes).reduce(0, +) == stream.count)
    }

    @Test(arguments: BadResponse.all)
    func refusesABadResponseWhole(_ bad: BadResponse) {
        let result = Self.parse(bad.wire, maxHeaderBytes: bad.maxHeaderBytes, maxBodyBytes: bad.maxBodyBytes)
        #expect(result.error == bad.error, "got \(result.error.map { "\($0)" } ?? "no error")")
        #expect(result.responses.isEmpty)
    }

    @Test(arguments: BadResponse.all)
    func refusesABadResponseByteByByte(_ bad: BadResponse) {
        let result = Self.parse(bad.wire, step: 1, maxHeaderBytes: bad.maxHeaderBytes, maxBodyBytes: bad.maxBodyBytes)
        #expect(result.error == bad.error, "got \(result.error.map { "\($0)" } ?? "no error")")
        #expect(result.responses.isEmpty)
    }

    /// Bad input is seen as soon as it can be, not only when the connection closes.
    @Test(arguments: BadResponse.all.filter { $0.error != .truncatedResponse })
    func refusesBeforeTheClose(_ bad: BadResponse) {
        var parser = HTTP1ResponseParser(maxHeaderBytes: bad.maxHeaderBytes, maxBodyBytes: bad.maxBodyBytes)
        parser.append(bad.wire)
        #expect(throws: bad.error) { _ = try parser.next() }
    }

    @Test func aGoodResponseThenGarbageGivesTheResponseThenAnErrorForever() throws {
        var parser = HTTP1ResponseParser()
        parser.append(Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokXYZ".utf8))
        let first = try #require(try parser.next())
        #expect(first.response.status == 200)
        #expect(throws: HTTP1ParseError.malformedStatusLine) { _ = try parser.next() }
        // The framing is lost: even a good response after it is refused.
        parser.append(Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8))
        #expect(throws: HTTP1ParseError.malformedStatusLine) { _ = try parser.next() }
        #expect(throws: HTTP1ParseError.malformedStatusLine) { _ = try parser.finish() }
    }

    @Test func bufferedBytesIsZeroOnlyAtAResponseBoundary() throws {
        var parser = HTTP1ResponseParser()
        #expect(parser.bufferedBytes == 0)
        let interim = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
        let final = Array("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody".utf8)
        parser.append(interim + final.prefix(40))
        #expect(try parser.next() == nil)
        #expect(parser.bufferedBytes == interim.count + 40)
        parser.append(Array(final.dropFirst(40)))
        let response = try #require(try parser.next())
        #expect(response.response.wireBytes == interim.count + final.count)
        #expect(parser.bufferedBytes == 0)
        #expect(try parser.finish() == nil)
    }

    /// Many responses through one parser: the buffer is compacted and reused, not grown.
    @Test func tenThousandResponsesInSmallReads() throws {
        let one = Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8)
        let stream = Array([[UInt8]](repeating: one, count: 10_000).joined())
        var parser = HTTP1ResponseParser()
        var count = 0
        var offset = 0
        while offset < stream.count {
            let end = min(stream.count, offset + 1500)
            stream[offset..<end].withUnsafeBytes { parser.append($0) }
            offset = end
            while try parser.next() != nil { count += 1 }
        }
        #expect(count == 10_000)
        #expect(parser.bufferedBytes == 0)
    }

    @Test func descriptionsAreShortAndFixed() {
        for bad in BadResponse.all {
            #expect(!bad.error.description.isEmpty && bad.error.description.utf8.count < 60)
        }
    }
}

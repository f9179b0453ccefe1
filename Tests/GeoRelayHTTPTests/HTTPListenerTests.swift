import Foundation
import GeoRelayCore
import GeoRelayHTTP
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

/// The listener in-process, with small limits so each one is reached in a moment: every
/// request is answered with the right status or the connection closed, and what goes over a
/// limit is never read into memory.
@Suite(.offThePool) struct HTTPListenerTests {
    /// A listener on an ephemeral loopback port answering `METHOD PATH BODY-BYTES`.
    final class World: Sendable {
        let listener: HTTPListener
        /// The listener's `run()`: it serves only while that runs.
        private let serving: Task<Void, Never>
        init(
            _ configure: (inout HTTPListener.Limits) -> Void = { _ in },
            handler: (@Sendable (HTTPListener.Request) -> HTTPListener.Response)? = nil
        ) throws {
            var limits = HTTPListener.Limits()
            configure(&limits)
            listener = try HTTPListener(
                listen: "127.0.0.1:0", what: "test.listen", limits: limits,
                handler: handler ?? { request in
                    HTTPListener.Response(
                        status: 200, reason: "OK", contentType: "text/plain",
                        body: Array("\(request.method) \(request.path) \(request.body.count)".utf8))
                })
            let listener = self.listener
            // Started off the shared pool: an unstructured task does not inherit the test's
            // executor, and on a busy pool the listener would not serve within the client's timeout.
            serving = Task(executorPreference: BlockingTestExecutor.shared) { await listener.run() }
        }
        deinit {
            listener.stop()
            serving.cancel()
        }

        func client(timeout: Duration = .seconds(5)) throws -> TCPTestClient {
            try TCPTestClient(port: listener.port, receiveTimeout: timeout)
        }
    }

    func text(_ outcome: TCPTestClient.HTTPOutcome) -> String? {
        guard case .answered(let answer) = outcome else { return nil }
        return String(decoding: answer.body, as: UTF8.self)
    }

    /// After an error answer the server closes: the next read ends, it does not time out.
    func expectClosed(_ client: TCPTestClient, _ what: String) {
        expectClosed(client.readToEnd(), what)
    }

    func expectClosed(_ read: TCPTestClient.Read, _ what: String) {
        switch read {
        case .closed: break
        case .timedOut: Issue.record("\(what): the connection was still open after the receive timeout")
        case .bytes(let bytes): Issue.record("\(what): \(bytes.count) more bytes instead of a close")
        }
    }

    @Test func aRequestIsAnsweredAndTheConnectionKept() throws {
        let world = try World()
        let client = try world.client()
        for index in 0..<3 {
            let outcome = client.exchange("POST /p?x=\(index) HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
            #expect(text(outcome) == "POST /p 5", "request \(index) on the kept connection")
        }
        #expect(world.listener.statistics.accepted == 1)
    }

    /// A request the listener answers itself; named, since a 17,000-byte request is no label.
    struct Malformed: Sendable, CustomTestStringConvertible {
        var name: String
        var request: String
        var status: Int
        init(_ name: String, _ request: String, _ status: Int) {
            self.name = name
            self.request = request
            self.status = status
        }
        var testDescription: String { "\(name) → \(status)" }
    }

    @Test(arguments: [
        Malformed("not a request line", "GARBAGE\r\n\r\n", 400),
        Malformed("no version", "GET /\r\n\r\n", 400),
        Malformed("bare LF line ends", "GET / HTTP/1.1\nHost: a\n\n", 400),
        Malformed("a header without a colon", "GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        Malformed("a space in a header name", "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
        Malformed("a space before the colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400),
        Malformed("a folded header", "GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400),
        Malformed("a negative Content-Length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        Malformed("a Content-Length with letters", "POST / HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n", 400),
        Malformed(
            "two different Content-Lengths", "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            400),
        Malformed("chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        Malformed("HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", 505),
        Malformed("an unknown expectation", "GET / HTTP/1.1\r\nExpect: something\r\n\r\n", 417),
        Malformed("a 9,000-byte target", "GET /\(String(repeating: "a", count: 9000)) HTTP/1.1\r\n\r\n", 414),
        Malformed("101 headers", "GET / HTTP/1.1\r\n" + String(repeating: "X-A: b\r\n", count: 101) + "\r\n", 431),
        Malformed(
            "a 17,000-byte header", "GET / HTTP/1.1\r\nX-Big: \(String(repeating: "b", count: 17_000))\r\n\r\n", 431),
        Malformed("a body over the limit", "POST / HTTP/1.1\r\nContent-Length: 65537\r\n\r\n", 413),
    ])
    func aMalformedOrOversizedRequestIsAnsweredAndClosed(_ malformed: Malformed) throws {
        let world = try World()
        let client = try world.client()
        let (_, outcome) = client.sendUntilAnswered(Array(malformed.request.utf8))
        #expect(outcome.status == malformed.status, "\(malformed.name): \(outcome)")
        if case .answered(let answer) = outcome { #expect(answer.header("connection") == "close") }
        expectClosed(client, "after \(malformed.name)")
        // The listener still serves everyone else.
        #expect(text(try world.client().exchange("GET /next HTTP/1.1\r\n\r\n")) == "GET /next 0")
    }

    /// The listener's own answers (what it logs, too) name the rule, never the request: a token
    /// in the target or a header stays out of them.
    @Test(arguments: ["Content-Length: s3cret-token", "Expect: s3cret-token", "Bad Name: s3cret-token"])
    func anErrorAnswerNeverQuotesTheRequest(header: String) throws {
        let world = try World()
        let outcome = try world.client().exchange("POST /?token=s3cret-token HTTP/1.1\r\n\(header)\r\n\r\n")
        guard case .answered(let answer) = outcome else {
            Issue.record("no answer to \(header): \(outcome)")
            return
        }
        #expect(answer.status >= 400)
        #expect(
            !String(decoding: answer.body, as: UTF8.self).contains("s3cret"),
            "\(String(decoding: answer.body, as: UTF8.self))")
    }

    /// A gigabyte announced is answered 413 before the body is read: the client sends a few
    /// megabytes at most before it sees the answer and the close.
    @Test func aGigabyteBodyIsRefusedWithoutBeingRead() throws {
        let world = try World()
        let client = try world.client(timeout: .seconds(10))
        let head = Array("POST / HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n".utf8)
        let (sent, outcome) = client.sendUntilAnswered(head, fillerBytes: 1 << 30, within: .seconds(30))
        #expect(outcome.status == 413)
        #expect(sent < 64 << 20, "the client got \(sent) bytes out before the answer")
        expectClosed(client, "after 413")
    }

    @Test func pipelinedRequestsAreAnsweredInOrder() throws {
        let world = try World()
        let client = try world.client()
        let requests =
            "GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz\r\nGET /c HTTP/1.1\r\nConnection: close\r\n\r\n"
        try client.write(Array(requests.utf8))
        var pending: [UInt8] = []
        let answers = (0..<3).map { _ in text(client.readHTTPResponse(pending: &pending)) }
        #expect(answers == ["GET /a 0", "POST /b 3", "GET /c 0"])
        expectClosed(client, "after Connection: close")
    }

    @Test func aBadRequestAfterAGoodOneInThePipelineIsAnsweredInTurn() throws {
        let world = try World()
        let client = try world.client()
        try client.write(Array("GET /a HTTP/1.1\r\n\r\nNOT HTTP\r\n\r\nGET /never HTTP/1.1\r\n\r\n".utf8))
        var pending: [UInt8] = []
        #expect(text(client.readHTTPResponse(pending: &pending)) == "GET /a 0")
        #expect(client.readHTTPResponse(pending: &pending).status == 400)
        expectClosed(client, "after the pipeline's bad request")
    }

    @Test func expectContinueGetsTheInterimAnswer() throws {
        let world = try World()
        let client = try world.client()
        try client.write(Array("POST /u HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n".utf8))
        var pending: [UInt8] = []
        #expect(client.readHTTPResponse(pending: &pending).status == 100)
        try client.write(Array("body".utf8))
        #expect(text(client.readHTTPResponse(pending: &pending)) == "POST /u 4")
    }

    @Test func http10ClosesUnlessAskedToKeepAlive() throws {
        let world = try World()
        let plain = try world.client()
        #expect(text(plain.exchange("GET /x HTTP/1.0\r\n\r\n")) == "GET /x 0")
        expectClosed(plain, "HTTP/1.0 without keep-alive")
        let kept = try world.client()
        let outcome = kept.exchange("GET /y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        guard case .answered(let answer) = outcome else {
            Issue.record("no answer: \(outcome)")
            return
        }
        #expect(answer.header("connection") == "keep-alive")
        #expect(text(kept.exchange("GET /z HTTP/1.0\r\n\r\n")) == "GET /z 0")
    }

    /// A byte a second never makes a whole request: answered 408 once the request timeout passes.
    @Test func aSlowClientIsAnswered408() async throws {
        let world = try World { $0.requestTimeout = .seconds(2) }
        let client = try world.client(timeout: .seconds(10))
        // Timed on the client's own thread: the await's resumption can wait for a busy test pool.
        let (outcome, took) = try await offThePool { () -> (TCPTestClient.HTTPOutcome, Duration) in
            let start = ContinuousClock.now
            for byte in Array("GET /slow HTTP/1.1\r\nHost: a\r\n".utf8) {
                var poller = pollfd(fd: client.fd, events: Int16(POLLIN), revents: 0)
                if poll(&poller, 1, 0) > 0 { break }
                try? client.write([byte])
                sleep(1) // the scenario itself: a client sending a byte a second
            }
            var pending: [UInt8] = []
            let outcome = client.readHTTPResponse(pending: &pending)
            return (outcome, ContinuousClock.now - start)
        }
        #expect(outcome.status == 408)
        #expect(took < .seconds(9), "the slow client was answered only after \(took)")
        expectClosed(client, "after 408")
    }

    @Test func anIdleKeptConnectionIsClosedAfterTheIdleTimeout() async throws {
        let world = try World { $0.idleTimeout = .milliseconds(500) }
        let client = try world.client(timeout: .seconds(10))
        #expect(text(client.exchange("GET / HTTP/1.1\r\n\r\n")) == "GET / 0")
        // Half a second of waiting for the close, on a thread of its own rather than the test pool's.
        expectClosed(try await offThePool { client.readToEnd() }, "idle past the timeout")
        #expect(world.listener.statistics.idleClosed == 1)
    }

    /// At the limit the longest idle connection makes room: idle clients cannot keep a phone out.
    @Test func atTheLimitTheLongestIdleConnectionIsClosedForANewOne() throws {
        let world = try World { $0.maxConnections = 4 }
        let idle = try (0..<4).map { _ in try world.client() }
        // Known to the listener (accepted) before the next arrives: each answered once.
        for client in idle { #expect(text(client.exchange("GET /hello HTTP/1.1\r\n\r\n")) == "GET /hello 0") }
        let phone = try world.client()
        #expect(text(phone.exchange("GET /phone HTTP/1.1\r\n\r\n")) == "GET /phone 0")
        expectClosed(idle[0], "the longest idle connection")
        #expect(world.listener.statistics.evicted == 1)
        #expect(text(idle[3].exchange("GET /still HTTP/1.1\r\n\r\n")) == "GET /still 0")
    }

    /// Only when every connection has a request with the handler is a new one refused, with 503.
    @Test func atTheLimitWithEveryConnectionBusyANewOneIsAnswered503() throws {
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let handler: @Sendable (HTTPListener.Request) -> HTTPListener.Response = { _ in
            entered.signal()
            _ = release.wait(timeout: .now() + 10)
            return HTTPListener.Response(status: 200, reason: "OK")
        }
        let world = try World({ $0.maxConnections = 2 }, handler: handler)
        let busy = try (0..<2).map { _ in try world.client() }
        for client in busy { try client.write(Array("GET / HTTP/1.1\r\n\r\n".utf8)) }
        for index in 0..<2 { #expect(entered.wait(timeout: .now() + 5) == .success, "handler \(index) never started") }
        let refused = try world.client()
        var pending: [UInt8] = []
        #expect(refused.readHTTPResponse(pending: &pending).status == 503)
        release.signal()
        release.signal()
        for client in busy {
            var rest: [UInt8] = []
            #expect(client.readHTTPResponse(pending: &rest).status == 200)
        }
        #expect(world.listener.statistics.refused == 1)
    }

    @Test func afterStopAConnectIsRefused() throws {
        let world = try World()
        #expect(text(try world.client().exchange("GET / HTTP/1.1\r\n\r\n")) == "GET / 0")
        world.listener.stop()
        #expect(IPv4Socket.connect(host: "127.0.0.1", port: world.listener.port) == nil, "still accepting after stop()")
    }
}

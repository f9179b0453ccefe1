import CCurl
import Dispatch
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Synchronization
import Testing

@testable import GeoRelayForward

/// The pipelined connection push batches ride on, against servers of the styles in the wild:
/// one that keeps connections, one that closes after every answer, one with a keep-alive limit,
/// one that drops a request's connection, one that never answers.
@Suite(.offThePool) struct PipelinedConnectionTests {
    static func request(_ n: Int, url: String) throws -> [UInt8] {
        var out: [UInt8] = []
        try HTTP1Request(target: HTTP1Target(url: url + "/push"), headers: [("Content-Type", "text/plain")]).append(
            body: Array("batch \(n)".utf8), to: &out)
        return out
    }

    /// Submits `count` requests at once and takes their answers; the bodies the answers echo, in order.
    static func exchange(_ count: Int, server: HTTPTestServer, timeoutSeconds: Double = 10) throws -> (
        answers: [String], connection: PipelinedConnection
    ) {
        let connection = PipelinedConnection(
            url: server.url, tls: .init(), connectTimeoutSeconds: 5, timeoutSeconds: timeoutSeconds, meter: nil)
        for n in 0..<count { connection.submit(try request(n, url: server.url)) }
        var answers: [String] = []
        while connection.outstanding > 0 {
            switch connection.next() {
            case .success(let response):
                answers.append("\(response.status) " + String(decoding: response.body, as: UTF8.self))
            case .failure(let error): answers.append("failed: \(error.message)")
            }
        }
        return (answers, connection)
    }

    static func echo(_ seen: SeenRequests? = nil) -> HTTPTestServer.Handler {
        { request in
            seen?.append(request)
            return HTTPTestResponse(status: 200, body: request.body)
        }
    }

    static func expected(_ count: Int) -> [String] { (0..<count).map { "200 batch \($0)" } }

    @Test func requestsGoBackToBackOnOneConnectionAndAnswersComeInOrder() throws {
        let server = try HTTPTestServer(handler: Self.echo())
        defer { server.stop() }
        let (answers, connection) = try Self.exchange(8, server: server)
        #expect(answers == Self.expected(8))
        #expect(server.connectionsAccepted == 1)
        #expect(
            server.deepestPipeline >= 2, "requests waiting behind one another at the server: \(server.deepestPipeline)")
        #expect(connection.pipelines)
    }

    /// A server that closes after every answer: the requests behind each go again, one at a time
    /// from the first close on, and each is answered once.
    @Test func aServerThatClosesAfterEachAnswerGetsEveryRequestOnceOneAtATime() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer(closesAfterEachResponse: true, handler: Self.echo(seen))
        defer { server.stop() }
        let (answers, connection) = try Self.exchange(5, server: server)
        #expect(answers == Self.expected(5))
        #expect(seen.bodies == (0..<5).map { "batch \($0)" }, "each request handled once, in order")
        #expect(!connection.pipelines)
        #expect(server.connectionsAccepted == 5)
    }

    /// nginx's keep-alive limit: a new connection every few answers, still pipelined.
    @Test func aKeepAliveLimitOnlyOpensANewConnection() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer(responsesPerConnection: 3, handler: Self.echo(seen))
        defer { server.stop() }
        let (answers, connection) = try Self.exchange(9, server: server)
        #expect(answers == Self.expected(9))
        #expect(seen.bodies == (0..<9).map { "batch \($0)" })
        #expect(connection.pipelines)
        #expect(server.connectionsAccepted == 3)
    }

    /// A kept-alive connection the server closed while idle (its restart here): the next burst
    /// goes again on a new connection, still pipelined (an idle close says nothing of pipelines).
    @Test func anIdleConnectionTheServerClosedIsReplacedAndStillPipelines() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer(handler: Self.echo(seen))
        defer { server.stop() }
        let connection = PipelinedConnection(
            url: server.url, tls: .init(), connectTimeoutSeconds: 5, timeoutSeconds: 10, meter: nil)
        connection.submit(try Self.request(0, url: server.url))
        #expect((try? connection.next().get())?.status == 200)
        let port = server.port
        server.stop()
        try server.start(port: port)
        for n in 1...3 { connection.submit(try Self.request(n, url: server.url)) }
        var answers: [String] = []
        while connection.outstanding > 0 {
            if case .success(let response) = connection.next() {
                answers.append(String(decoding: response.body, as: UTF8.self))
            } else {
                answers.append("failed")
            }
        }
        #expect(answers == ["batch 1", "batch 2", "batch 3"])
        #expect(connection.pipelines)
        #expect(seen.bodies == (0...3).map { "batch \($0)" }, "each once")
    }

    /// A request whose connection the server drops, every time: it fails after going twice, and
    /// the requests behind it go with the connection (nothing left outstanding).
    @Test func aRequestTheServerDropsTwiceFailsAndTakesTheRestWithIt() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer { request in
            seen.append(request)
            return String(decoding: request.body, as: UTF8.self) == "batch 1"
                ? nil : HTTPTestResponse(status: 200, body: request.body)
        }
        defer { server.stop() }
        let (answers, connection) = try Self.exchange(4, server: server)
        #expect(answers.first == "200 batch 0")
        #expect(answers.count == 2)
        #expect(answers.last?.hasPrefix("failed: ") == true)
        #expect(connection.outstanding == 0)
        #expect(seen.bodies.filter { $0 == "batch 1" }.count == 2, "the dropped request went twice, no more")
    }

    /// Nothing comes back: the wait ends at the timeout, as a failure.
    @Test func noAnswerEndsAtTheTimeout() throws {
        let release = DispatchSemaphore(value: 0)
        let server = try HTTPTestServer { _ in
            _ = release.wait(timeout: .now() + 30)
            return HTTPTestResponse(status: 200)
        }
        defer {
            release.signal()
            server.stop()
        }
        let (answers, _) = try Self.exchange(2, server: server, timeoutSeconds: 1)
        #expect(answers.count == 1)
        #expect(answers.first?.contains("no answer in 1 s") == true, "\(answers)")
    }

    /// Nothing listens: a failure, at once.
    @Test func aRefusedConnectionFails() throws {
        let server = try HTTPTestServer(handler: Self.echo())
        let url = server.url
        server.stop()
        let connection = PipelinedConnection(
            url: url, tls: .init(), connectTimeoutSeconds: 5, timeoutSeconds: 5, meter: nil)
        connection.submit(try Self.request(0, url: url))
        guard case .failure(let error) = connection.next() else {
            Issue.record("a connection to a closed port answered")
            return
        }
        #expect(error.isConnectFailure)
        #expect(connection.outstanding == 0)
    }
}

/// How many batches stay on the wire, from what the answers show of the link.
@Suite struct PipelineDepthTests {
    /// A link with `roundTrip` and `bytesPerSecond`: a lone request's answer, and back-to-back answers' spacing.
    static func measured(roundTrip: Double, bytesPerSecond: Double, batch: Int, ceiling: Int = 8) -> PipelineDepth {
        var depth = PipelineDepth(ceiling: ceiling)
        // A small batch alone (current positions), then a full one alone, then two back to back.
        depth.answered(bytes: 300, elapsed: .seconds(roundTrip + 300 / bytesPerSecond), spacing: nil)
        depth.answered(bytes: batch, elapsed: .seconds(roundTrip + Double(batch) / bytesPerSecond), spacing: nil)
        depth.answered(
            bytes: batch, elapsed: .seconds(roundTrip + 2 * Double(batch) / bytesPerSecond),
            spacing: .seconds(Double(batch) / bytesPerSecond))
        return depth
    }

    @Test func beforeAnyAnswerOneBatchGoesBehindAnother() {
        #expect(PipelineDepth(ceiling: 8).depth(batchBytes: 5000) == 2)
        #expect(PipelineDepth(ceiling: 1).depth(batchBytes: 5000) == 1)
    }

    /// Geostationary (600 ms, 32 KB/s), batches of 5 KB: each takes 0.16 s, so five fill a round trip.
    @Test func aLongFastPathKeepsARoundTripsWorthOnTheWire() {
        let depth = Self.measured(roundTrip: 0.6, bytesPerSecond: 32_000, batch: 5_000)
        #expect((5...6).contains(depth.depth(batchBytes: 5_000)), "\(depth.depth(batchBytes: 5_000))")
        #expect(depth.depth(batchBytes: 500) == 8, "small batches: the ceiling")
    }

    /// Narrowband (1.4 s, 1.2 KB/s), batches of 7 KB: each takes six seconds; one behind it is enough,
    /// and an alarm then waits behind one batch, not eight.
    @Test func aSlowLinkKeepsOneBatchBehindAnother() {
        let depth = Self.measured(roundTrip: 1.4, bytesPerSecond: 1_200, batch: 7_000)
        #expect(depth.depth(batchBytes: 7_000) == 2)
    }

    @Test func aResetForgetsThePath() {
        var depth = Self.measured(roundTrip: 0.6, bytesPerSecond: 32_000, batch: 5_000)
        depth.reset()
        #expect(depth.roundTrip == nil)
        #expect(depth.depth(batchBytes: 5_000) == 2)
    }
}

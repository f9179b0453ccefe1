import CCurl
import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

@testable import GeoRelayForward

/// The requests a fake server saw, in the order it saw them.
final class SeenRequests: Sendable {
    private let requests = Mutex<[HTTPTestRequest]>([])
    func append(_ request: HTTPTestRequest) { requests.withLock { $0.append(request) } }
    var all: [HTTPTestRequest] { requests.withLock { $0 } }
    var bodies: [String] { all.map { String(decoding: $0.body, as: UTF8.self) } }
}

/// A server that reads one request head, answers `reply` (however broken) and closes.
final class OneShotServer: Sendable {
    let port: Int
    private let listener: Int32

    init(reply: [UInt8]) throws {
        let bound = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 1)
        listener = bound.descriptor.release()
        port = bound.port
        let listener = self.listener
        let thread = Thread {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { return }
            defer { close(fd) }
            var head: [UInt8] = []
            var byte: UInt8 = 0
            // The request's head, so that closing leaves nothing unread (which would reset the connection).
            while !head.suffix(4).elementsEqual([13, 10, 13, 10]), recv(fd, &byte, 1, 0) == 1 { head.append(byte) }
            _ = reply.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            shutdown(fd, Int32(SHUT_WR))
        }
        thread.start()
    }

    /// Wakes the accepting thread if no client came.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}

@Suite(.offThePool) struct CurlConnectionTests {

    /// `count` form POSTs back to back, each with its sequence number in the body.
    static func requests(_ count: Int, url: String, from first: Int = 0) throws -> [UInt8] {
        let request = try HTTP1Request(
            target: HTTP1Target(url: url), headers: [("Content-Type", "application/x-www-form-urlencoded")])
        var out: [UInt8] = []
        for n in first..<(first + count) { request.append(body: Array("id=dev&seq=\(n)".utf8), to: &out) }
        return out
    }

    static func bodies(_ range: Range<Int>) -> [String] { range.map { "id=dev&seq=\($0)" } }

    /// Everything handed to the connection before reading a single response (waiting for
    /// writable when the socket is full): the requests are in flight together.
    static func sendAll(_ bytes: [UInt8], on connection: CurlConnection) throws {
        var sent = 0
        let deadline = ContinuousClock.now + .seconds(10)
        while sent < bytes.count {
            let n = try bytes.withUnsafeBytes { try connection.send(UnsafeRawBufferPointer(rebasing: $0[sent...])) }
            sent += n
            if n == 0 {
                guard ContinuousClock.now < deadline else {
                    throw CurlError(CURLE_OPERATION_TIMEDOUT, message: "send timed out in the test")
                }
                _ = try connection.wait(readable: false, writable: true, timeout: .seconds(1))
            }
        }
    }

    @Test func fiftyPipelinedRequestsOnOneConnectionAnsweredInOrder() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer { request in
            seen.append(request)
            return HTTPTestResponse(status: 200, headers: [("Content-Type", "text/plain")], body: request.body)
        }
        defer { server.stop() }
        let url = server.url + "/osmand"
        let connection = try CurlConnection(url: url, connectTimeoutSeconds: 5)
        try connection.connect()
        let out = try Self.requests(50, url: url)
        try Self.sendAll(out, on: connection)
        let exchange = PipelinedExchange(on: connection, sending: [], expecting: 50)

        #expect(exchange.end == .open)
        #expect(exchange.responses.count == 50)
        #expect(exchange.responses.map { String(decoding: $0.response.body, as: UTF8.self) } == Self.bodies(0..<50))
        #expect(exchange.responses.allSatisfy { $0.response.status == 200 && $0.keepAlive })
        #expect(server.connectionsAccepted == 1)
        #expect(seen.bodies == Self.bodies(0..<50))
        #expect(
            seen.all.allSatisfy {
                $0.connection == 1 && $0.method == "POST" && $0.target == "/osmand"
                    && $0.header("Host") == "127.0.0.1:\(server.port)"
            })
        #expect(connection.bytesSent == out.count)
        #expect(connection.bytesReceived == exchange.responses.map(\.response.wireBytes).reduce(0, +))

        // The connection stays usable: a second batch follows on it.
        let more = PipelinedExchange(on: connection, sending: try Self.requests(5, url: url, from: 50), expecting: 5)
        #expect(more.end == .open)
        #expect(more.responses.map { String(decoding: $0.response.body, as: UTF8.self) } == Self.bodies(50..<55))
        #expect(server.connectionsAccepted == 1)
    }

    /// The server drops the connection instead of answering the 11th request (Traccar's way with
    /// a payload it cannot decode): the ten answers before it arrive, then the end is a close or a
    /// connection error, never a parse error or a hang.
    @Test func aServerClosingMidStreamEndsTheExchangeCleanly() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer { request in
            seen.append(request)
            if String(decoding: request.body, as: UTF8.self) == "id=dev&seq=10" { return nil }
            return HTTPTestResponse(status: 200, body: request.body)
        }
        defer { server.stop() }
        let connection = try CurlConnection(url: server.url, connectTimeoutSeconds: 5)
        try connection.connect()
        let out = try Self.requests(50, url: server.url)
        try Self.sendAll(out, on: connection)
        let exchange = PipelinedExchange(on: connection, sending: [], expecting: 50)

        #expect(exchange.responses.map { String(decoding: $0.response.body, as: UTF8.self) } == Self.bodies(0..<10))
        switch exchange.end {
        case .closed, .failed: break
        default: Issue.record("ended \(exchange.end), expected a close or a connection error")
        }
        #expect(seen.bodies == Self.bodies(0..<11))
    }

    /// A server that does not keep connections alive answers the first of several pipelined
    /// requests, says `Connection: close` and closes: the rest are the client's to send again.
    @Test func aServerThatClosesAfterEachResponseAnswersOnlyTheFirst() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer(closesAfterEachResponse: true) { request in
            seen.append(request)
            return HTTPTestResponse(status: 200, body: request.body)
        }
        defer { server.stop() }
        let connection = try CurlConnection(url: server.url, connectTimeoutSeconds: 5)
        try connection.connect()
        let exchange = PipelinedExchange(on: connection, sending: try Self.requests(5, url: server.url), expecting: 5)

        #expect(exchange.end == .closed)
        let response = try #require(exchange.responses.first)
        #expect(exchange.responses.count == 1)
        #expect(!response.keepAlive)
        #expect(response.response.header("connection") == "close")
        #expect(String(decoding: response.response.body, as: UTF8.self) == "id=dev&seq=0")
        #expect(seen.bodies == Self.bodies(0..<1))

        // A new connection for the next request, answered the same way.
        let again = try CurlConnection(url: server.url, connectTimeoutSeconds: 5)
        try again.connect()
        let second = PipelinedExchange(on: again, sending: try Self.requests(1, url: server.url, from: 1), expecting: 1)
        #expect(second.end == .open || second.end == .closed)
        #expect(second.responses.map { String(decoding: $0.response.body, as: UTF8.self) } == Self.bodies(1..<2))
        #expect(server.connectionsAccepted == 2)
    }

    /// Closed inside a body: the bytes that came are not a response.
    @Test func aServerClosingInsideAResponseIsATruncatedResponse() throws {
        let server = try OneShotServer(reply: Array("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this".utf8))
        defer { server.stop() }
        let url = "http://127.0.0.1:\(server.port)/"
        let connection = try CurlConnection(url: url, connectTimeoutSeconds: 5)
        try connection.connect()
        var out: [UInt8] = []
        try HTTP1Request(method: "GET", target: HTTP1Target(url: url)).append(to: &out)
        let exchange = PipelinedExchange(on: connection, sending: out, expecting: 1)
        #expect(exchange.end == .parseError(.truncatedResponse))
        #expect(exchange.responses.isEmpty)
    }

    @Test func connectingToAClosedPortFailsQuickly() throws {
        // Bound but not listening: the kernel refuses connections, and nobody else can take the port.
        let (socket, port) = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0)
        defer { withExtendedLifetime(socket) {} }
        let connection = try CurlConnection(url: "http://127.0.0.1:\(port)/", connectTimeoutSeconds: 10)
        let start = ContinuousClock.now
        let error = #expect(throws: CurlError.self) { try connection.connect() }
        #expect(error?.isConnectFailure == true, "\(error.map { "\($0)" } ?? "")")
        #expect(ContinuousClock.now - start < .seconds(5), "refused, not timed out")
        #expect(!connection.isConnected)
    }

    @Test func anIdleConnectionWouldBlock() throws {
        let server = try HTTPTestServer { _ in HTTPTestResponse(status: 200) }
        defer { server.stop() }
        let connection = try CurlConnection(url: server.url, connectTimeoutSeconds: 5)
        try connection.connect()
        var buffer = [UInt8](repeating: 0, count: 64)
        #expect(try buffer.withUnsafeMutableBytes { try connection.receive(into: $0) } == nil)
        let ready = try connection.wait(readable: true, writable: false, timeout: .milliseconds(50))
        #expect(!ready.readable && !ready.writable)
        let writable = try connection.wait(readable: false, writable: true, timeout: .seconds(5))
        #expect(writable.writable && !writable.readable)
    }
}

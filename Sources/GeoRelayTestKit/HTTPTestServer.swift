import CLinux
import Foundation
import GeoRelayCore
import Glibc
import Synchronization

/// A request as a fake server saw it.
package struct HTTPTestRequest: Sendable {
    package var method: String
    package var target: String
    package var headers: [(String, String)]
    package var body: [UInt8]
    /// Which accepted connection carried it (keep-alive checks).
    package var connection: Int

    package func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }
}

/// What a fake server answers; `nil` from a handler closes the connection without a response.
package struct HTTPTestResponse: Sendable {
    package var status: Int
    package var headers: [(String, String)]
    package var body: [UInt8]

    package init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// A small blocking HTTP/1.1 server on loopback for tests and benchmarks:
/// a thread per connection, keep-alive, Content-Length bodies.
///
/// Pipelined requests (several in one read) are answered one by one, in order, on their
/// connection, as Traccar's Netty HTTP codec does.
///
/// It can be stopped and started again on the same port, which is how tests
/// make the destination go away and come back.
package final class HTTPTestServer: Sendable {
    package typealias Handler = @Sendable (HTTPTestRequest) -> HTTPTestResponse?

    private let deepest = Mutex(0)
    private let handler: Handler
    /// After how many responses a connection closes (`Connection: close` on the last); nil: never.
    private let responsesPerConnection: Int?
    private let listener: TestTCPListener
    /// How long a request's answer waits for the next request to arrive behind it; nil: none.
    private let readsAhead: Duration?

    package var port: Int { listener.port }
    package var url: String { "http://127.0.0.1:\(port)" }
    package var connectionsAccepted: Int { listener.connectionsAccepted }
    /// The most requests that were on one connection at once, this one and those already received
    /// behind it: above 1 only when a client pipelines.
    package var deepestPipeline: Int { deepest.withLock { $0 } }

    /// Starts on an ephemeral loopback port.
    /// - Parameters:
    ///   - closesAfterEachResponse: a server that does not keep connections alive: every
    ///     response says `Connection: close` and the connection closes after it. Requests pipelined
    ///     behind it are read and dropped, never answered, so the client must send them again.
    ///   - responsesPerConnection: the same after this many responses, as nginx does after
    ///     `keepalive_requests` (1,000 by default).
    ///   - host: the address to listen on (`0.0.0.0` inside a test's network namespace).
    ///   - readsAhead: a server that reads before it answers: each answer waits up to this long for
    ///     another request behind it on the connection, so `deepestPipeline` shows a client that
    ///     pipelines whatever the timing (a client that does not gets every answer this late).
    package init(
        closesAfterEachResponse: Bool = false, responsesPerConnection: Int? = nil, host: String = "127.0.0.1",
        readsAhead: Duration? = nil, handler: @escaping Handler
    ) throws {
        self.handler = handler
        self.readsAhead = readsAhead
        self.responsesPerConnection = closesAfterEachResponse ? 1 : responsesPerConnection
        let server = WeakReference<HTTPTestServer>()
        listener = try TestTCPListener(name: "http-test", host: host) { fd, number in
            server.value?.serve(fd, number: number)
        }
        server.value = self
    }

    /// Listens (again) on `port` (0: any free port).
    package func start(port: Int) throws { try listener.start(port: port) }

    /// Closes the listener and every open connection: the server is gone.
    package func stop() { listener.stop() }

    private func serve(_ fd: Int32, number: Int) {
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var answered = 0
        while true {
            // Read until the end of the headers.
            var headerEnd: Int?
            while headerEnd == nil {
                headerEnd = HTTPTestWire.find([13, 10, 13, 10], in: buffer)
                if headerEnd != nil { break }
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { return }
                buffer.append(contentsOf: chunk[0..<n])
                if buffer.count > 1 << 20 { return }
            }
            guard let end = headerEnd else { return }
            // Byte-level parsing: the server must cost far less than the client it measures.
            guard let head = HTTPTestWire.parseHead(buffer[0..<end]) else { return }
            let length = head.contentLength
            let bodyStart = end + 4
            while buffer.count < bodyStart + length {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { return }
                buffer.append(contentsOf: chunk[0..<n])
            }
            let request = HTTPTestRequest(
                method: head.method, target: head.target, headers: head.headers,
                body: Array(buffer[bodyStart..<(bodyStart + length)]), connection: number)
            buffer.removeFirst(bodyStart + length)
            if let readsAhead, HTTPTestWire.count([13, 10, 13, 10], in: buffer) == 0 {
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let (seconds, attoseconds) = readsAhead.components
                if poll(&descriptor, 1, Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000)) > 0 {
                    let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    if n > 0 { buffer.append(contentsOf: chunk[0..<n]) }
                }
            }
            let waiting = HTTPTestWire.count([13, 10, 13, 10], in: buffer)
            deepest.withLock { $0 = max($0, 1 + waiting) }
            guard let response = handler(request) else { return }
            answered += 1
            let last = responsesPerConnection.map { answered >= $0 } ?? false
            let bytes = HTTPTestWire.frame(response, closing: last)
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes {
                    send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
                }
                if n <= 0 { return }
                offset += n
            }
            if last {
                Self.lingeringClose(fd)
                return
            }
            if request.header("Connection")?.lowercased() == "close" { return }
        }
    }

    /// Closes the way nginx's lingering close does: shut the write side, then read and drop what
    /// the client still sends until it closes too (at most two seconds). Closing with unread bytes
    /// would make the kernel answer with a reset, which can reach the client as an error instead of
    /// the clean end after the response that this mode promises.
    private static func lingeringClose(_ fd: Int32) {
        shutdown(fd, Int32(SHUT_WR))
        let deadline = ContinuousClock.now + .seconds(2)
        var scratch = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < deadline {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 100) >= 0 || errno == EINTR else { return }
            if descriptor.revents == 0 { continue }
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return }
        }
    }
}

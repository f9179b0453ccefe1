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
                headerEnd = Self.find([13, 10, 13, 10], in: buffer)
                if headerEnd != nil { break }
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 { return }
                buffer.append(contentsOf: chunk[0..<n])
                if buffer.count > 1 << 20 { return }
            }
            guard let end = headerEnd else { return }
            // Byte-level parsing: the server must cost far less than the client it measures.
            guard let head = Self.parseHead(buffer[0..<end]) else { return }
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
            if let readsAhead, Self.count([13, 10, 13, 10], in: buffer) == 0 {
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let (seconds, attoseconds) = readsAhead.components
                if poll(&descriptor, 1, Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000)) > 0 {
                    let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    if n > 0 { buffer.append(contentsOf: chunk[0..<n]) }
                }
            }
            let waiting = Self.count([13, 10, 13, 10], in: buffer)
            deepest.withLock { $0 = max($0, 1 + waiting) }
            guard let response = handler(request) else { return }
            var out = "HTTP/1.1 \(response.status) \(Self.reason(response.status))\r\n"
            for (name, value) in response.headers { out += "\(name): \(value)\r\n" }
            answered += 1
            let last = responsesPerConnection.map { answered >= $0 } ?? false
            if last { out += "Connection: close\r\n" }
            out += "Content-Length: \(response.body.count)\r\n\r\n"
            let bytes = Array(out.utf8) + response.body
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

    /// How many request heads are complete in `haystack` (bodiless requests: what a pipelining
    /// client sends), counted up to 16 in one pass so a fast benchmark client is not slowed.
    private static func count(_ needle: [UInt8], in haystack: [UInt8]) -> Int {
        var found = 0
        var matched = 0
        for byte in haystack {
            matched = byte == needle[matched] ? matched + 1 : (byte == needle[0] ? 1 : 0)
            if matched == needle.count {
                found += 1
                matched = 0
                if found == 16 { break }
            }
        }
        return found
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        var i = 0
        let last = haystack.count - needle.count
        outer: while i <= last {
            for j in 0..<needle.count where haystack[i + j] != needle[j] {
                i += 1
                continue outer
            }
            return i
        }
        return nil
    }

    private struct Head {
        var method: String
        var target: String
        var headers: [(String, String)]
        var contentLength: Int
    }

    /// The request line and headers, split on CRLF, ':' and spaces.
    private static func parseHead(_ bytes: ArraySlice<UInt8>) -> Head? {
        var lines: [ArraySlice<UInt8>] = []
        var start = bytes.startIndex
        var i = bytes.startIndex
        while i < bytes.endIndex {
            if bytes[i] == 13, i + 1 < bytes.endIndex, bytes[i + 1] == 10 {
                lines.append(bytes[start..<i])
                i += 2
                start = i
            } else {
                i += 1
            }
        }
        lines.append(bytes[start..<bytes.endIndex])
        let parts = lines[0].split(separator: 32)
        guard parts.count == 3 else { return nil }
        var head = Head(
            method: String(decoding: parts[0], as: UTF8.self), target: String(decoding: parts[1], as: UTF8.self),
            headers: [], contentLength: 0)
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: 58) else { continue }
            var valueStart = colon + 1
            while valueStart < line.endIndex, line[valueStart] == 32 { valueStart += 1 }
            let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
            let value = String(decoding: line[valueStart..<line.endIndex], as: UTF8.self)
            if name.utf8.count == 14, name.lowercased() == "content-length" { head.contentLength = Int(value) ?? 0 }
            head.headers.append((name, value))
        }
        return head
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 400: "Bad Request"
        case 404: "Not Found"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Status"
        }
    }
}

import CLinux
import Foundation
import Glibc
import GeoRelayCore
import Synchronization

/// A small HTTP/1.1 server for the relay's own ports (phones, metrics): a
/// thread per connection with blocking I/O and a receive timeout, bounded
/// headers and bodies, keep-alive. The clients are few, so threads are fine.
package final class HTTPListener: Sendable {
    package struct Request: Sendable {
        package var method: String
        package var target: String
        package var headers: [(String, String)]
        package var body: [UInt8]

        package func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name }?.1
        }

        /// The path without its query.
        package var path: String { String(target.prefix { $0 != "?" }) }
    }

    package struct Response: Sendable {
        package var status: Int
        package var reason: String
        package var contentType: String?
        package var body: [UInt8]

        package init(status: Int, reason: String, contentType: String? = nil, body: [UInt8] = []) {
            self.status = status
            self.reason = reason
            self.contentType = contentType
            self.body = body
        }
    }

    private let listenFD: Int32
    private let handler: @Sendable (Request) -> Response
    private let open = Atomic<Int>(0)
    package let port: Int
    static let maxConnections = 256
    static let maxHead = 16 * 1024
    static let maxBody = 64 * 1024

    /// Listens on `HOST:PORT`; `what` names the setting in errors (`ingest.http.listen`).
    package init(listen: String, what: String, handler: @escaping @Sendable (Request) -> Response) throws(IngestStartError) {
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw IngestStartError(description: "\(what) \(listen): expected HOST:PORT")
        }
        let host = String(listen[..<colon])
        let socket: (fd: Int32, port: Int)
        do {
            socket = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: host.isEmpty ? "0.0.0.0" : host, port: port, backlog: 64)
        } catch {
            throw IngestStartError(description: "cannot listen on \(listen) (\(what)): \(String(cString: strerror(error.errno)))")
        }
        self.port = socket.port
        self.listenFD = socket.fd
        self.handler = handler
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "georelay-http"
        thread.start()
    }

    package func stop() {
        shutdown(listenFD, Int32(SHUT_RDWR))
        close(listenFD)
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            guard open.add(1, ordering: .relaxed).newValue <= Self.maxConnections else {
                open.subtract(1, ordering: .relaxed)
                close(fd)
                continue
            }
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            Thread { [self] in
                serve(fd)
                close(fd)
                open.subtract(1, ordering: .relaxed)
            }.start()
        }
    }

    private func serve(_ fd: Int32) {
        var buffer: [UInt8] = []
        while let request = readRequest(fd, &buffer) {
            let response = handler(request)
            var head = "HTTP/1.1 \(response.status) \(response.reason)\r\nContent-Length: \(response.body.count)\r\n"
            if let type = response.contentType { head += "Content-Type: \(type)\r\n" }
            let close = request.header("connection")?.lowercased() == "close"
            if close { head += "Connection: close\r\n" }
            let bytes = Array((head + "\r\n").utf8) + response.body
            guard bytes.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == bytes.count, !close else { return }
        }
    }

    private func readRequest(_ fd: Int32, _ buffer: inout [UInt8]) -> Request? {
        var chunk = [UInt8](repeating: 0, count: 16384)
        func fill() -> Bool {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return false }
            buffer.append(contentsOf: chunk[0..<n])
            return true
        }
        var end: Int?
        while end == nil {
            end = headEnd(buffer)
            if end != nil { break }
            if buffer.count > Self.maxHead || !fill() { return nil }
        }
        guard let headEnd = end else { return nil }
        let head = String(decoding: buffer[0..<headEnd], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let parts = lines.removeFirst().split(separator: " ")
        guard parts.count == 3 else { return nil }
        let headers = lines.compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        let length = Int(headers.first { $0.0.lowercased() == "content-length" }?.1 ?? "0") ?? -1
        guard length >= 0, length <= Self.maxBody else { return nil }
        let start = headEnd + 4
        while buffer.count < start + length {
            if !fill() { return nil }
        }
        let request = Request(method: String(parts[0]), target: String(parts[1]), headers: headers, body: Array(buffer[start..<(start + length)]))
        buffer.removeFirst(start + length)
        return request
    }

    private func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i
        }
        return nil
    }
}

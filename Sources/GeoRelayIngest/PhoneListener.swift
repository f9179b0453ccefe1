import CLinux
import Foundation
import Glibc
import GeoRelayCore
import GeoRelaySpool
import Synchronization

/// The OsmAnd HTTP port for phones: the requests a Traccar server takes on its
/// OsmAnd port (GET or POST with query or form parameters, or the JSON body of
/// current Traccar Client apps), answered 200 only once the position is durable
/// and 400 for a request it cannot use. A phone pointed here instead of at the
/// server gets the relay's buffering for free.
///
/// Phones are few, so each connection has its own thread with blocking I/O and
/// a receive timeout; the spool's group commit still batches their writes.
/// Requests from a georelay (its User-Agent) are refused with 508, so a
/// destination pointed back at this listener cannot loop.
package final class PhoneListener: Sendable {
    private let listenFD: Int32
    private let spool: Spool
    private let logger: Logger
    private let decoder: LineDecoder
    private let open = Atomic<Int>(0)
    package let port: Int
    static let maxConnections = 256
    static let maxHead = 16 * 1024
    static let maxBody = 64 * 1024

    /// Listens on `HOST:PORT` (e.g. `0.0.0.0:5055`).
    package init(listen: String, spool: Spool, decoder: LineDecoder, logger: Logger) throws(IngestStartError) {
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw IngestStartError(description: "ingest.http.listen \(listen): expected HOST:PORT")
        }
        let host = String(listen[..<colon])
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(port.bigEndian)
        address.sin_addr.s_addr = inet_addr(host.isEmpty ? "0.0.0.0" : host)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard fd >= 0, bound == 0, Glibc.listen(fd, 64) == 0 else {
            let reason = String(cString: strerror(errno))
            if fd >= 0 { close(fd) }
            throw IngestStartError(description: "cannot listen on \(listen) (ingest.http.listen): \(reason)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        self.port = Int(UInt16(bigEndian: actual.sin_port))
        self.listenFD = fd
        self.spool = spool
        self.decoder = decoder
        self.logger = logger
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "georelay-phones"
        thread.start()
        logger.info("phones: OsmAnd HTTP on \(listen)")
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

    private struct Request {
        var method: String
        var target: String
        var headers: [(String, String)]
        var body: [UInt8]

        func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name }?.1
        }
    }

    private func serve(_ fd: Int32) {
        var buffer: [UInt8] = []
        while let request = readRequest(fd, &buffer) {
            let (status, text) = answer(request)
            var response = "HTTP/1.1 \(status) \(text)\r\nContent-Length: 0\r\n"
            let close = request.header("connection")?.lowercased() == "close"
            if close { response += "Connection: close\r\n" }
            response += "\r\n"
            let bytes = Array(response.utf8)
            guard bytes.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == bytes.count, !close else { return }
        }
    }

    /// Stores the request's position; the status to answer.
    private func answer(_ request: Request) -> (Int, String) {
        if request.header("user-agent")?.hasPrefix("georelay") == true {
            logger.warning("refused a request from a georelay: a destination points back at this listener")
            return (508, "Loop Detected")
        }
        let position: Position
        do throws(IngestError) {
            if request.header("content-type")?.hasPrefix("application/json") == true {
                position = try TraccarClientJSON.decode(String(decoding: request.body, as: UTF8.self))
            } else {
                // As Traccar: the URL's parameters, or the body's when the URL has none.
                var query = request.target.firstIndex(of: "?").map { String(request.target[request.target.index(after: $0)...]) } ?? ""
                if query.isEmpty { query = String(decoding: request.body, as: UTF8.self) }
                position = try OsmAndQuery.decode(query, defaultDevice: nil)
            }
            try decoder.validate(position, nowMs: WallClock.nowMs())
        } catch {
            spool.add(counters: ["ingest.rejected.\(error.code)": 1])
            logger.info("phone request refused (\(error.code)): \(error.message)")
            return (400, "Bad Request")
        }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<AppendResult?>(nil)
        spool.append([position]) { results in
            result.withLock { $0 = results.first }
            done.signal()
        }
        done.wait()
        return result.withLock { $0?.seq } != nil ? (200, "OK") : (503, "Service Unavailable")
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

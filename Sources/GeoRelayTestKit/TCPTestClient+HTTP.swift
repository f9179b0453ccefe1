import CLinux
import Foundation
import Glibc

/// HTTP/1.1 on a raw connection, for tests and benchmarks that must send what no
/// HTTP client would (10,000 headers, a byte a second, a gigabyte announced) and see
/// exactly how the server answers.
extension TCPTestClient {
    /// One response as read off the wire.
    package struct HTTPAnswer: Sendable, Equatable {
        package var status: Int
        package var headers: [(String, String)]
        package var body: [UInt8]

        package func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }

        package static func == (a: HTTPAnswer, b: HTTPAnswer) -> Bool {
            a.status == b.status && a.body == b.body
                && a.headers.map { "\($0.0):\($0.1)" } == b.headers.map { "\($0.0):\($0.1)" }
        }
    }

    /// How an exchange ended: an answer, or the connection closed or quiet before one.
    package enum HTTPOutcome: Sendable, Equatable {
        case answered(HTTPAnswer)
        case closed
        case timedOut

        package var status: Int? {
            if case .answered(let answer) = self { return answer.status }
            return nil
        }
    }

    /// Reads one response (head and `Content-Length` body) within the receive timeout;
    /// `pending` keeps bytes of pipelined responses that came after it.
    package func readHTTPResponse(pending: inout [UInt8]) -> HTTPOutcome {
        var buffer = pending
        func headEnd() -> Int? {
            guard buffer.count >= 4 else { return nil }
            for i in 0...(buffer.count - 4)
            where buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 {
                return i
            }
            return nil
        }
        func more() -> HTTPOutcome? {
            var chunk = [UInt8](repeating: 0, count: 16384)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer += chunk[0..<n]
                return nil
            }
            if n < 0, errno == EINTR { return nil }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK { return .timedOut }
            return .closed
        }
        var end = headEnd()
        while end == nil {
            if let outcome = more() { return outcome }
            end = headEnd()
        }
        let head = String(decoding: buffer[0..<end!], as: UTF8.self).components(separatedBy: "\r\n")
        let statusLine = head[0].split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return .closed }
        let headers = head.dropFirst().compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        let length = Int(headers.first { $0.0.lowercased() == "content-length" }?.1 ?? "0") ?? 0
        let start = end! + 4
        while buffer.count < start + length {
            if let outcome = more() { return outcome }
        }
        pending = Array(buffer[(start + length)...])
        return .answered(HTTPAnswer(status: status, headers: headers, body: Array(buffer[start..<(start + length)])))
    }

    /// Sends `request` and reads its response.
    package func exchange(_ request: String) -> HTTPOutcome {
        do { try write(Array(request.utf8)) } catch { return .closed }
        var pending: [UInt8] = []
        return readHTTPResponse(pending: &pending)
    }

    /// A phone's OsmAnd report as Traccar Client sends it (a form body), ready to write.
    package static func phoneRequest(device: String, second: Int, keepAlive: Bool = true) -> String {
        let body = "id=\(device)&timestamp=\(1_784_953_800 + second)&lat=59.5&lon=10.5&speed=3"
        return
            "POST / HTTP/1.1\r\nHost: relay\r\nUser-Agent: TraccarClient/9\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            + (keepAlive ? "" : "Connection: close\r\n") + "Content-Length: \(body.utf8.count)\r\n\r\n" + body
    }
}

extension TCPTestClient {
    /// Sends `head`, then `fillerBytes` of body filler, without ever blocking on a server that
    /// stopped reading: it stops as soon as an answer can be read (or the connection breaks, or
    /// `within` passes), then reads the answer. For requests too big to send whole: a gigabyte
    /// announced, ten thousand headers.
    /// - Returns: how many bytes went out, and how the exchange ended.
    package func sendUntilAnswered(_ head: [UInt8], fillerBytes: Int = 0, within: Duration = .seconds(10)) -> (
        sent: Int, outcome: HTTPOutcome
    ) {
        let total = head.count + fillerBytes
        let filler = [UInt8](repeating: UInt8(ascii: "x"), count: 64 * 1024)
        let deadline = ContinuousClock.now + within
        var sent = 0
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        sending: while sent < total, ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN | POLLOUT), revents: 0)
            guard poll(&poller, 1, 100) >= 0 else { continue }
            if poller.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 { break }
            guard poller.revents & Int16(POLLOUT) != 0 else { continue }
            let n: Int
            if sent < head.count {
                n = head.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            } else {
                n = filler.withUnsafeBytes {
                    send(fd, $0.baseAddress, min($0.count, total - sent), Int32(MSG_NOSIGNAL))
                }
            }
            if n > 0 {
                sent += n
            } else if n < 0, errno != EAGAIN, errno != EWOULDBLOCK, errno != EINTR {
                break sending
            }
        }
        _ = fcntl(fd, F_SETFL, flags)
        var pending: [UInt8] = []
        return (sent, readHTTPResponse(pending: &pending))
    }
}

/// HTTP/1.1 as the fake servers read and write it, over a socket (`HTTPTestServer`) or the
/// simulated network (`SimulatedHTTPServer`): byte-level, so a server costs far less than the
/// client it measures.
package enum HTTPTestWire {
    /// Takes the first whole request off `buffer` (its head and Content-Length body).
    /// - Returns: nil while it is incomplete; `.malformed` for a head that does not parse.
    package static func takeRequest(from buffer: inout [UInt8], connection: Int) -> Taken? {
        guard let end = find([13, 10, 13, 10], in: buffer) else { return nil }
        guard let head = parseHead(buffer[0..<end]) else { return .malformed }
        let bodyStart = end + 4
        guard buffer.count >= bodyStart + head.contentLength else { return nil }
        let request = HTTPTestRequest(
            method: head.method, target: head.target, headers: head.headers,
            body: Array(buffer[bodyStart..<(bodyStart + head.contentLength)]), connection: connection)
        buffer.removeFirst(bodyStart + head.contentLength)
        return .request(request)
    }

    package enum Taken: Sendable {
        case request(HTTPTestRequest)
        case malformed
    }

    /// `response` on the wire, `Connection: close` on it when the server closes after it.
    package static func frame(_ response: HTTPTestResponse, closing: Bool) -> [UInt8] {
        var out = "HTTP/1.1 \(response.status) \(reason(response.status))\r\n"
        for (name, value) in response.headers { out += "\(name): \(value)\r\n" }
        if closing { out += "Connection: close\r\n" }
        out += "Content-Length: \(response.body.count)\r\n\r\n"
        return Array(out.utf8) + response.body
    }

    /// How many request heads are complete in `haystack` (bodiless requests: what a pipelining
    /// client sends), counted up to 16 in one pass so a fast benchmark client is not slowed.
    package static func count(_ needle: [UInt8], in haystack: [UInt8]) -> Int {
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

    package static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
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

    package struct Head {
        package var method: String
        package var target: String
        package var headers: [(String, String)]
        package var contentLength: Int
    }

    /// The request line and headers, split on CRLF, ':' and spaces.
    package static func parseHead(_ bytes: ArraySlice<UInt8>) -> Head? {
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

    package static func reason(_ status: Int) -> String {
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

/// A request as the listener hands it to its handler: the head parsed, the body whole.
package struct HTTPServerRequest: Sendable {
    package var method: String
    package var target: String
    package var headers: [(String, String)]
    package var body: [UInt8]
    /// The client's address (dotted IPv4; empty when unknown): what a per-client limit counts by.
    package var clientAddress: String
    /// The box's address the client connected to: a `Host` naming it names this box.
    package var localAddress: String

    package init(
        method: String, target: String, headers: [(String, String)], body: [UInt8], clientAddress: String = "",
        localAddress: String = ""
    ) {
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.clientAddress = clientAddress
        self.localAddress = localAddress
    }

    /// The first header of that name; `name` is compared case-insensitively.
    package func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    /// The path without its query.
    package var path: String { String(target.prefix { $0 != "?" }) }
}

/// What a handler answers; the listener adds the framing (`Content-Length`, `Connection`).
package struct HTTPServerResponse: Sendable {
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

    /// The bytes on the wire. `close` says so in a `Connection: close` header; an HTTP/1.0
    /// client that asked for keep-alive is told it got it.
    func serialized(close: Bool, http10KeepAlive: Bool = false) -> [UInt8] {
        var head = "HTTP/1.1 \(status) \(reason)\r\nContent-Length: \(body.count)\r\n"
        if let contentType { head += "Content-Type: \(contentType)\r\n" }
        if close {
            head += "Connection: close\r\n"
        } else if http10KeepAlive {
            head += "Connection: keep-alive\r\n"
        }
        head += "\r\n"
        var bytes = Array(head.utf8)
        bytes.reserveCapacity(bytes.count + body.count)
        bytes += body
        return bytes
    }
}

import GeoRelayCore

/// How a Traccar server (its OsmAnd port) takes positions and answers.
///
/// One position per request: the server takes no batches. Form POST with the
/// parameters in the body and none in the URL, because `OsmAndProtocolDecoder`
/// reads the body only when the URL carries no parameters. No compression:
/// the server has no decompressor.
package struct TraccarProtocol: Sendable {
    package let url: String
    package let timeoutSeconds: Double
    package let connectTimeoutSeconds: Double

    package init(settings: Configuration.DestinationSettings) {
        url = settings.url
        timeoutSeconds = settings.requestTimeoutSeconds
        connectTimeoutSeconds = settings.connectTimeoutSeconds
    }

    package func request(for position: Position) -> HTTPRequest {
        HTTPRequest(
            method: "POST", url: url,
            headers: [("Content-Type", "application/x-www-form-urlencoded")],
            body: Array(OsmAndQuery.encode(position, fitting: OsmAndQuery.maxBodyBytes).utf8),
            timeoutSeconds: timeoutSeconds, connectTimeoutSeconds: connectTimeoutSeconds)
    }

    /// Maps Traccar's answers onto what the forwarder does next.
    package func outcome(of result: Result<HTTPResponse, CurlError>) -> DeliveryOutcome {
        switch result {
        case .success(let response):
            return outcome(of: response)
        case .failure(let error):
            // Traccar closes the connection without a response when its decoder
            // throws on the payload: that payload will never be taken.
            if error.isNoResponse { return .rejected("server closed the connection without a response") }
            return .unavailable(error.message, retryAfter: nil, transport: true)
        }
    }

    func outcome(of response: HTTPResponse) -> DeliveryOutcome {
        switch response.status {
        case 200..<300:
            // Traccar answers an empty body or a queued command, never a page:
            // an HTML 200 is a captive portal or a proxy, not the server.
            if Self.looksLikeHTML(response) {
                return .unavailable(
                    "HTTP \(response.status) with an HTML page: not the Traccar server (captive portal?)",
                    retryAfter: nil, transport: true)
            }
            return .delivered
        case 400, 404:
            return .unknownDevice("HTTP \(response.status): the server does not know this device")
        case 413, 414, 415, 422:
            return .rejected("HTTP \(response.status): the server refused the payload")
        case 429, 503:
            return .unavailable("HTTP \(response.status)", retryAfter: Self.retryAfter(response), transport: false)
        default:
            return .unavailable("HTTP \(response.status)", retryAfter: nil, transport: false)
        }
    }

    static func looksLikeHTML(_ response: HTTPResponse) -> Bool {
        if let type = response.header("Content-Type"), type.utf8.count >= 4,
            type.lowercased().contains("html")
        {
            return true
        }
        let head = response.body.prefix(64).drop { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }
        return head.first == UInt8(ascii: "<")
    }

    /// `Retry-After` in seconds (the HTTP-date form is rare from these servers and read as absent).
    static func retryAfter(_ response: HTTPResponse) -> Double? {
        guard let value = response.header("Retry-After"), let seconds = Double(value.trimmingWhitespace), seconds >= 0
        else { return nil }
        return min(seconds, 3600)
    }
}

extension TraccarProtocol {
    /// A position as the pipelined engine frames it: a GET with the position in the query.
    ///
    /// `OsmAndProtocolDecoder` reads the URL's query first and the body only when the query is
    /// empty, so this decodes exactly as the form POST does, and is 67 bytes shorter: no
    /// `Content-Type`, no `Content-Length`, no `User-Agent` (a position costs about 190 bytes both
    /// ways instead of 280). The query keeps the destination URL's own query, if it has one. What
    /// is the same for every request is laid out once, when the destination is set up.
    struct PipelinedFraming: Sendable {
        /// `GET /path?` (or `GET /path?own&`).
        private let head: [UInt8]
        /// ` HTTP/1.1`, `Host` and the blank line.
        private let tail: [UInt8]
        /// The canary: the destination URL, no position.
        private let canary: [UInt8]
        /// `POST /path HTTP/1.1`, `Host` and the form's `Content-Type`, for a position whose
        /// query would make the request line longer than the server reads; nil when the URL has
        /// a query of its own (Traccar then never reads the body).
        private let formHead: [UInt8]?

        init(target: HTTP1Target) {
            let path = Array(target.target.utf8)
            let ownQuery = path.contains(UInt8(ascii: "?"))
            // The URL's credentials, for a proxy in front of the server (Traccar asks for none).
            let host =
                "Host: \(target.hostHeader)\r\n" + (target.authorization.map { "Authorization: \($0)\r\n" } ?? "")
            head = Array("GET ".utf8) + path + [ownQuery ? UInt8(ascii: "&") : UInt8(ascii: "?")]
            tail = Array(" HTTP/1.1\r\n\(host)\r\n".utf8)
            canary = Array("GET ".utf8) + path + tail
            formHead =
                ownQuery
                ? nil
                : Array(
                    "POST \(target.target) HTTP/1.1\r\n\(host)Content-Type: application/x-www-form-urlencoded\r\n".utf8)
        }

        /// Appends the request for `position`; returns its bytes. A GET while its request line
        /// is within the 4,096 bytes Traccar reads; else a form POST (the body reads up to 64 KiB),
        /// with extra attributes left out, longest first, if even that is too long.
        func append(_ position: Position, to buffer: inout [UInt8]) -> Int {
            let start = buffer.count
            // `GET <path>?<query> HTTP/1.1`: the head, the query, and the tail's first 9 bytes.
            let lineRoom = OsmAndQuery.maxRequestLineBytes - head.count - 9
            let query = OsmAndQuery.encode(position)
            if query.utf8.count <= lineRoom || formHead == nil {
                buffer.append(contentsOf: head)
                buffer.append(
                    contentsOf: (query.utf8.count <= lineRoom ? query : OsmAndQuery.encode(position, fitting: lineRoom))
                        .utf8)
                buffer.append(contentsOf: tail)
            } else if let formHead {
                let body = OsmAndQuery.encode(position, fitting: OsmAndQuery.maxBodyBytes)
                buffer.append(contentsOf: formHead)
                buffer.append(contentsOf: "Content-Length: \(body.utf8.count)\r\n\r\n".utf8)
                buffer.append(contentsOf: body.utf8)
            }
            return buffer.count - start
        }

        /// Appends the canary; returns its bytes.
        func appendCanary(to buffer: inout [UInt8]) -> Int {
            buffer.append(contentsOf: canary)
            return canary.count
        }
    }
}

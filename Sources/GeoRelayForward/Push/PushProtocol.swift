import GeoRelayCore
import GeoRelaySpool

/// What one push request came to.
package enum PushOutcome: Sendable, Equatable {
    /// 2xx: the server has the whole batch.
    case delivered
    /// 401: the token is no good.
    case unauthorized
    /// 413: the batch is too big.
    case tooLarge
    /// 415: the server does not take this Content-Encoding.
    case unsupportedEncoding
    /// 400 or 422: something in the batch is refused; halve it to find what.
    case badBatch(String)
    /// Back off (honouring `retryAfter`); `transport` when nothing reached the server.
    case unavailable(String, retryAfter: Double?, transport: Bool)
}

/// The tracking-push wire contract: a JSON array of points per request,
/// compressed, with the bearer token and the tenant in headers.
package struct PushProtocol: Sendable {
    package let settings: Configuration.DestinationSettings
    package let push: PushSettings

    package init(settings: Configuration.DestinationSettings) {
        self.settings = settings
        self.push = settings.push ?? PushSettings()
    }

    /// One point as JSON, without separators: the batch is these joined by commas in brackets.
    ///
    /// Written byte by byte: at a backlog's pace this runs half a million times a
    /// second, and building Strings piece by piece cost more than compressing.
    package func encodePoint(_ position: Position) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(192)
        out.append(contentsOf: prefix)
        JSONBytes.appendQuotedBody(position.device, to: &out)
        out.append(contentsOf: trackerSuffix)
        JSONBytes.appendISO8601(milliseconds: position.timeMs, to: &out)
        out.append(contentsOf: #"","lat":"#.utf8)
        // Coordinates to 1e-7° (about 1 cm), everything else to 1e-3: finer than any
        // GPS fix, and shorter than a shortest round-trip form of a converted unit.
        JSONBytes.appendFixed(position.lat, decimals: 7, to: &out)
        out.append(contentsOf: #","lng":"#.utf8)
        JSONBytes.appendFixed(position.lon, decimals: 7, to: &out)
        func add(_ key: StaticString, _ value: Double?) {
            guard let value, value.isFinite else { return }
            out.append(contentsOf: UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
            JSONBytes.appendFixed(value, decimals: 3, to: &out)
        }
        add(#","speed":"#, position.speed)
        add(#","heading":"#, position.course)
        add(#","altitude":"#, position.altitude)
        add(#","accuracy":"#, position.accuracy)
        add(#","battery":"#, position.battery)
        if let alarm = position.alarm {
            out.append(contentsOf: #","alarm":""#.utf8)
            JSONBytes.appendQuotedBody(alarm, to: &out)
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// `{"driver":"<username>","trackerId":"` — the same for every point.
    private var prefix: [UInt8] {
        var out = Array(#"{"driver":""#.utf8)
        JSONBytes.appendQuotedBody(push.username, to: &out)
        out.append(contentsOf: #"","trackerId":""#.utf8)
        return out
    }

    /// `@<username>","timestamp":"`.
    private var trackerSuffix: [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "@")]
        JSONBytes.appendQuotedBody(push.username, to: &out)
        out.append(contentsOf: #"","timestamp":""#.utf8)
        return out
    }

    /// The batch body, uncompressed.
    package func encodeBatch(_ points: [[UInt8]]) -> [UInt8] {
        var body: [UInt8] = [UInt8(ascii: "[")]
        body.reserveCapacity(points.reduce(2) { $0 + $1.count + 1 })
        for (index, point) in points.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: point)
        }
        body.append(UInt8(ascii: "]"))
        return body
    }

    /// A batch's headers (the framing adds `Host` and `Content-Length`).
    package func headers(encoding: PushSettings.Compression, token: String) -> [(String, String)] {
        var headers = [
            ("Authorization", "Bearer \(token)"),
            ("X-Tenant", push.tenant),
            ("Content-Type", "application/json"),
        ]
        if encoding != .none { headers.append(("Content-Encoding", encoding.rawValue)) }
        return headers
    }

    package func request(body: [UInt8], encoding: PushSettings.Compression, token: String) -> HTTPRequest {
        HTTPRequest(
            method: "POST", url: settings.url, headers: headers(encoding: encoding, token: token), body: body,
            timeoutSeconds: settings.requestTimeoutSeconds, connectTimeoutSeconds: settings.connectTimeoutSeconds)
    }

    package func outcome(of result: Result<HTTPResponse, CurlError>) -> PushOutcome {
        switch result {
        case .failure(let error):
            return .unavailable(error.message, retryAfter: nil, transport: true)
        case .success(let response):
            switch response.status {
            case 200..<300:
                if TraccarProtocol.looksLikeHTML(response) {
                    return .unavailable(
                        "HTTP \(response.status) with an HTML page: not the push endpoint (captive portal?)",
                        retryAfter: nil, transport: true)
                }
                return .delivered
            case 401: return .unauthorized
            case 413: return .tooLarge
            case 415: return .unsupportedEncoding
            case 400, 422: return .badBatch("HTTP \(response.status)")
            case 429, 503:
                return .unavailable(
                    "HTTP \(response.status)", retryAfter: TraccarProtocol.retryAfter(response), transport: false)
            default: return .unavailable("HTTP \(response.status)", retryAfter: nil, transport: false)
            }
        }
    }
}

/// Why the listener answered a request itself instead of handing it on: the status it
/// answered, and a short reason safe to log and to send back: it names the rule or the limit
/// and never quotes the request (whose target or headers may carry a token).
///
/// Every such answer closes the connection: after a malformed or oversized head the
/// listener cannot tell where the next request would start.
struct HTTPRequestError: Error, Sendable, CustomStringConvertible {
    let status: Int
    let reason: String
    let detail: String

    var description: String { "\(status) \(reason): \(detail)" }

    static func badRequest(_ detail: String) -> Self { Self(status: 400, reason: "Bad Request", detail: detail) }
    static func requestTimeout(_ detail: String) -> Self {
        Self(status: 408, reason: "Request Timeout", detail: detail)
    }
    static func payloadTooLarge(_ detail: String) -> Self {
        Self(status: 413, reason: "Content Too Large", detail: detail)
    }
    static func uriTooLong(_ detail: String) -> Self { Self(status: 414, reason: "URI Too Long", detail: detail) }
    static func expectationFailed(_ detail: String) -> Self {
        Self(status: 417, reason: "Expectation Failed", detail: detail)
    }
    static func headersTooLarge(_ detail: String) -> Self {
        Self(status: 431, reason: "Request Header Fields Too Large", detail: detail)
    }
    static func notImplemented(_ detail: String) -> Self {
        Self(status: 501, reason: "Not Implemented", detail: detail)
    }
    static func versionNotSupported(_ detail: String) -> Self {
        Self(status: 505, reason: "HTTP Version Not Supported", detail: detail)
    }
    static func serviceUnavailable(_ detail: String) -> Self {
        Self(status: 503, reason: "Service Unavailable", detail: detail)
    }

    /// The answer on the wire, always closing.
    var response: HTTPServerResponse {
        HTTPServerResponse(status: status, reason: reason, contentType: "text/plain", body: Array((detail + "\n").utf8))
    }
}

/// What one attempt to deliver one position (or batch) came to.
package enum DeliveryOutcome: Sendable, Equatable, CustomStringConvertible {
    /// The server has it.
    case delivered
    /// The server refused this payload for good: quarantine it and go on.
    case rejected(String)
    /// The server does not know the device: park the device, deliver the others.
    case unknownDevice(String)
    /// The destination cannot take anything now: back off (honouring `retryAfter` seconds).
    /// `transport` is true when nothing reached the server (connect, DNS, timeout),
    /// so a cheap connectivity probe says when to try again.
    case unavailable(String, retryAfter: Double?, transport: Bool)

    package var description: String {
        switch self {
        case .delivered: "delivered"
        case .rejected(let reason): "refused: \(reason)"
        case .unknownDevice(let reason): "unknown device: \(reason)"
        case .unavailable(let reason, let retryAfter, _):
            "unavailable: \(reason)" + (retryAfter.map { " (retry after \(Int($0)) s)" } ?? "")
        }
    }
}

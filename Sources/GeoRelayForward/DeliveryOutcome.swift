/// What one attempt to deliver one position (or batch) came to.
package enum DeliveryOutcome: Sendable, Equatable {
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
}

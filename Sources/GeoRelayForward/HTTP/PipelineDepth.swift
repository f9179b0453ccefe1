/// How many batches to keep on the wire at once: enough that the link never idles for a round
/// trip between them, and no more.
///
/// A batch takes `bytes × secondsPerByte` to cross the link; the answer to it comes a round trip
/// later. With `1 + roundTrip / transfer` batches on the wire the link is busy throughout; more
/// would only queue in the terminal's modem, where an alarm sent behind them waits (on a narrowband
/// link a 7 KB batch takes six seconds). Both are measured from the answers: the round trip is the
/// shortest answer seen (a small batch's is nearly all round trip), the transfer time per byte the
/// shortest spacing of back-to-back answers over their bytes, or a lone batch's answer over its
/// bytes once the round trip is taken out.
///
/// A value without I/O: the forwarder tells it each answer, with its timing.
package struct PipelineDepth: Sendable {
    package let ceiling: Int
    package private(set) var roundTrip: Duration?
    package private(set) var secondsPerByte: Double?
    /// The size of the batch whose answer gave `roundTrip`.
    private var roundTripBytes = 0

    /// Before anything is measured: one batch behind another, which the next answers measure.
    package static let initial = 2

    package init(ceiling: Int) {
        self.ceiling = max(1, ceiling)
    }

    /// Takes note of an answer to a request of `bytes`, `elapsed` after it went; `spacing` is the
    /// time since the answer before it when it was already on the wire behind that one.
    package mutating func answered(bytes: Int, elapsed: Duration, spacing: Duration?) {
        guard bytes > 0, elapsed > .zero else { return }
        if elapsed < roundTrip ?? .seconds(86_400) {
            roundTrip = elapsed
            roundTripBytes = bytes
        }
        var perByte: Double?
        if let spacing, spacing > .zero {
            perByte = (spacing / .seconds(1)) / Double(bytes)
        } else if let roundTrip, elapsed > roundTrip, bytes > 2 * roundTripBytes {
            // What the larger batch took beyond the smaller one's answer is its extra bytes' transfer:
            // the shortest answer carries its own batch's transfer too, so a batch no larger than
            // it would measure a link many times faster than it is.
            perByte = ((elapsed - roundTrip) / .seconds(1)) / Double(bytes - roundTripBytes)
        }
        if let perByte { secondsPerByte = min(secondsPerByte ?? perByte, perByte) }
    }

    /// The batches to keep on the wire when each is about `bytes`.
    package func depth(batchBytes bytes: Int) -> Int {
        guard let roundTrip, let secondsPerByte else { return min(ceiling, Self.initial) }
        let transfer = max(1e-6, secondsPerByte * Double(max(1, bytes)))
        let behind = (roundTrip / .seconds(1)) / transfer
        guard behind.isFinite else { return ceiling }
        return Int(min(Double(ceiling), 1 + behind.rounded(.up)))
    }

    /// The bytes to keep on the wire across every connection of a destination when a batch is
    /// about `bytes`: the path's bandwidth-delay product and two batches more. Before anything is
    /// measured, TCP's initial window (ten segments) or two batches, as `depth` starts with: a
    /// LAN's first round trip is full with it, a satellite's holds little behind it that a later
    /// decision would wait for.
    package func bytesOnTheWire(batchBytes bytes: Int) -> Int {
        guard let roundTrip, let secondsPerByte, secondsPerByte > 0 else {
            return max(Self.initialWindow, Self.initial * max(0, bytes))
        }
        let product = (roundTrip / .seconds(1)) / secondsPerByte
        guard product.isFinite else { return .max }
        return Int(min(Double(Int.max / 2), product)) + Self.queued * max(0, bytes)
    }

    /// Batches queued beyond the bandwidth-delay product: enough that an answer's processing or a
    /// new connection's identification does not leave the link idle.
    package static let queued = 2

    /// TCP's initial congestion window (RFC 6928): ten segments of 1,448 bytes.
    package static let initialWindow = 14_480

    /// The route moved: measure the new path.
    package mutating func reset() {
        self = PipelineDepth(ceiling: ceiling)
    }
}

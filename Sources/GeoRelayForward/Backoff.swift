/// Exponential backoff with jitter between a floor and a ceiling (5 s to 5 min
/// by default, as in the Traccar client), reset by the first success.
package struct Backoff: Sendable {
    package let minSeconds: Double
    package let maxSeconds: Double
    package private(set) var failures = 0

    package init(minSeconds: Double, maxSeconds: Double) {
        self.minSeconds = minSeconds
        self.maxSeconds = max(minSeconds, maxSeconds)
    }

    /// Records a failure and returns how long to wait before the next attempt.
    /// Jitter (±20%) keeps several relays behind one outage from retrying in step.
    package mutating func nextDelay<R: RandomNumberGenerator>(using generator: inout R) -> Double {
        // 2^failures, the shift capped at 30 (far past any ceiling): no shift reaches Int's width.
        let base = min(maxSeconds, minSeconds * Double(1 << min(failures, 30)))
        failures += 1
        let jittered = base * Double.random(in: 0.8...1.2, using: &generator)
        return min(maxSeconds, max(minSeconds, jittered))
    }

    package mutating func reset() { failures = 0 }
}

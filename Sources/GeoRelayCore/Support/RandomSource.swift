import Synchronization

/// Where the relay's chance comes from (backoff jitter, the spacing of the return watch's
/// probes): the system's generator in the daemon, a seeded one in a test, so a run on a
/// simulated clock and network is the same run again from its seed. Handed in, as the clock is.
package final class RandomSource: Sendable {
    /// nil: the system's generator.
    private let seeded: Mutex<SeededRandom?>

    /// The system's generator.
    package static let system = RandomSource()

    private init() { seeded = Mutex(nil) }

    /// The same draws for the same seed.
    package init(seed: UInt64) { seeded = Mutex(SeededRandom(seed: seed)) }

    package func next() -> UInt64 {
        seeded.withLock { state in
            guard var generator = state else {
                var system = SystemRandomNumberGenerator()
                return system.next()
            }
            defer { state = generator }
            return generator.next()
        }
    }

    /// A generator for the standard library's `random(in:using:)`, drawing from this source.
    package var generator: Draws { Draws(source: self) }

    package struct Draws: RandomNumberGenerator, Sendable {
        let source: RandomSource
        package mutating func next() -> UInt64 { source.next() }
    }
}

/// SplitMix64 (Steele, Lea and Flood 2014): small, fast and well spread; the same draws for the same seed.
package struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64
    package init(seed: UInt64) { state = seed }
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

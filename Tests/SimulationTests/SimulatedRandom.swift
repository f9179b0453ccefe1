import Foundation

/// A random number generator from one seed (SplitMix64): every draw of a simulated voyage comes
/// from it, so a seed replays the same voyage, outages and all.
struct SimulatedRandom: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A duration between `low` and `high` seconds, evenly spread on a log scale: as many
    /// outages of minutes as of hours as of days.
    mutating func logUniformSeconds(_ low: Double, _ high: Double) -> Double {
        let unit = Double(next() >> 11) / Double(1 << 53)
        return low * pow(high / low, unit)
    }
}

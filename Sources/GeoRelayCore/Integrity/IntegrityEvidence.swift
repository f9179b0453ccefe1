/// A vessel's integrity state, worst last: what each position carries, what status shows.
package enum IntegrityState: String, Sendable, Equatable, Comparable, CaseIterable {
    case ok
    /// Something is off that alone proves nothing: one receiver's fix lost, its reported
    /// velocity against its track, a sky suspiciously even.
    case degraded
    /// The receivers' signals collapsed, or every one lost its fix, under way.
    case jammed
    /// The receivers report what no vessel does: a jump no hull sails, receivers that leave
    /// their separation, a receiver clock that steps.
    case spoofed

    private var rank: Int { Self.allCases.firstIndex(of: self)! }
    package static func < (a: Self, b: Self) -> Bool { a.rank < b.rank }
}

/// One thing the watch saw, with the receivers it concerns and what it measured: what an
/// episode's record, status and log say.
package struct IntegrityEvidence: Sendable, Equatable {
    package enum Kind: String, Sendable, Equatable {
        /// Between two fixes, farther than `maxSpeed` could go.
        case jump
        /// Two receivers farther apart, or closer, than their antennas are.
        case separation
        /// The receiver's clock stepped against the relay's monotonic clock.
        case clockStep
        /// The receiver's C/N0 fell to half its usual, or it hears almost nothing.
        case signalCollapse
        /// The receiver lost its fix while the vessel was under way.
        case fixLost
        /// Reported speed over ground against the speed its fixes make.
        case velocity
        /// C/N0 even across many satellites, as one transmitter's are.
        case uniformSignal
    }

    package var kind: Kind
    package var sources: [String]
    /// What was measured, in words with figures: "3.2 km in 1 s".
    package var detail: String

    /// What this kind of evidence alone makes of the vessel.
    package var implies: IntegrityState {
        switch kind {
        case .jump, .separation, .clockStep: .spoofed
        case .signalCollapse, .fixLost, .velocity, .uniformSignal: .degraded
        }
    }

    package var description: String { "\(kind.rawValue) (\(sources.joined(separator: ", "))): \(detail)" }
}

/// How the watch judges (`integrity` in the configuration).
package struct IntegritySettings: Sendable, Equatable {
    /// Whether the relay watches at all (`integrity.enabled`).
    package var enabled = true
    /// Speed over ground no vessel of the fleet reaches, m/s (58 kn): well above any displacement hull.
    package var maxSpeed: Double = 58 * OsmAndQuery.metresPerSecondPerKnot
    /// How long evidence must hold before an episode begins.
    package var enterSeconds: Double = 3
    /// How long all must be clear before it ends.
    package var clearSeconds: Double = 60
    /// How far two receivers may stray from their separation (learned while all is well, or
    /// `separationMetres`) before it counts.
    package var toleranceMetres: Double = 25
    /// The antennas' separation, when configured; learned otherwise.
    package var separationMetres: Double?
    /// Speed over ground above which the vessel is under way, m/s.
    package var underWaySpeed: Double = 1

    package init() {}
}

extension IntegritySettings {
    /// The `integrity` object: every key optional, each range-checked.
    package static func parse(_ node: inout ConfigNode) throws(ConfigError) -> IntegritySettings {
        var settings = IntegritySettings()
        settings.enabled = try node.bool("enabled", default: true)
        settings.maxSpeed =
            try node.number("maxSpeedKnots", default: 58, min: 5, max: 1_000) * OsmAndQuery.metresPerSecondPerKnot
        settings.enterSeconds = try node.number("enterSeconds", default: settings.enterSeconds, min: 0, max: 3_600)
        settings.clearSeconds = try node.number("clearSeconds", default: settings.clearSeconds, min: 1, max: 86_400)
        settings.toleranceMetres = try node.number(
            "toleranceMetres", default: settings.toleranceMetres, min: 1, max: 100_000)
        return settings
    }
}

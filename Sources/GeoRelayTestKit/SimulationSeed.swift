import Foundation
import GeoRelayCore

/// The seed of one simulated run, and how to replay it: a failing simulated test says both.
///
/// Every run draws from its seed alone (the servers' processing times, the schedule of faults), and
/// the network and clock are the test's, so the same seed replays the same run, byte for byte.
/// `GEORELAY_SEED=n` pins every simulated test to seed `n`; `GEORELAY_SEEDS=k` runs `k` seeds each.
package struct SimulationSeed: Sendable, CustomStringConvertible {
    package let value: UInt64

    package init(_ value: UInt64) {
        self.value = value
    }

    /// The seeds a simulated test runs: `GEORELAY_SEED` alone if set, else the first
    /// `GEORELAY_SEEDS` (`count` unless set).
    package static func all(_ count: Int = 4) -> [SimulationSeed] {
        let environment = ProcessInfo.processInfo.environment
        if let pinned = environment["GEORELAY_SEED"].flatMap(UInt64.init) { return [SimulationSeed(pinned)] }
        let wanted = environment["GEORELAY_SEEDS"].flatMap(Int.init).map { min(max($0, 1), 10_000) } ?? count
        return (1...UInt64(wanted)).map(SimulationSeed.init)
    }

    /// A one-line command that replays exactly this run of `test` (`Suite/test`).
    package func replay(_ test: String) -> String {
        "seed \(value): replay with GEORELAY_SEED=\(value) swift test --filter '\(test)'"
    }

    package var description: String { "seed \(value)" }
}

/// A server that reads everything and answers nothing: wedged behind a live connection.
package struct SimulatedBlackHole: SimulatedService {
    package init() {}

    package func accept(connection number: Int) -> any SimulatedSession { Session() }

    private final class Session: SimulatedSession {
        var holdsUnread: Bool { false }
        func received(_ bytes: [UInt8], at now: RelayInstant) -> [SimulatedReply] { [] }
    }
}

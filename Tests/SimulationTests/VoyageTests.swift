import Foundation
import GeoRelayTestTraits
import Testing

/// A voyage on simulated time (issue 37 §2), several seeds in `make test`; any length and seed
/// with `make simulate DAYS=… SEED=…` (GEORELAY_SIM_DAYS, GEORELAY_SIM_SEED).
@Suite(.longOffThePool) struct VoyageTests {
    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    static var long: Bool { environment["GEORELAY_LONG_TESTS"] != nil }

    /// `make test`'s seeds: three short voyages that between them meet every kind of event the
    /// voyage draws (`theShortSeedsMeetEveryKindOfEvent` checks it); seeds 1 to 3 in the long form.
    static let shortSeeds: [UInt64] = [8, 25, 26]

    static var seeds: [UInt64] {
        if let seed = environment["GEORELAY_SIM_SEED"].flatMap({ UInt64($0) }) { return [seed] }
        return long ? [1, 2, 3] : shortSeeds
    }

    /// Four days in `make test` (each seed's month budget is its days' worth, so it is spent
    /// halfway through, as a month's is), thirty with `GEORELAY_LONG_TESTS=1`.
    static var days: Int {
        environment["GEORELAY_SIM_DAYS"].flatMap { Int($0) }.map { max(1, min($0, 3_650)) } ?? (long ? 30 : 4)
    }

    /// Short voyages prove as much as the long ones only if together they meet every event.
    @Test func theShortSeedsMeetEveryKindOfEvent() {
        let voyages = Self.shortSeeds.map { Voyage(days: 4, seed: $0) }
        let met: [(String, Int)] = [
            ("an outage", voyages.reduce(0) { $0 + $1.outages.count }),
            ("a clean restart", voyages.reduce(0) { $0 + $1.restarts.count { !$0.crash } }),
            ("a crash", voyages.reduce(0) { $0 + $1.restarts.count { $0.crash } }),
            ("a step of the wall clock", voyages.reduce(0) { $0 + $1.clockSteps.count }),
            ("an alarm", voyages.reduce(0) { $0 + $1.alarms.count }),
            ("a restore of Traccar", voyages.reduce(0) { $0 + $1.restores.count }),
            ("the gateway's maintenance", voyages.reduce(0) { $0 + $1.maintenance.count }),
            ("Traccar's maintenance", voyages.reduce(0) { $0 + $1.traccarMaintenance.count }),
        ]
        for (event, count) in met {
            #expect(count > 0, "no voyage of seeds \(Self.shortSeeds) over 4 days has \(event): pick others")
        }
    }

    /// How far the clock jumps at a time (GEORELAY_SIM_STEP_MINUTES, 1 to 1,440).
    static var stepMinutes: Int64 {
        environment["GEORELAY_SIM_STEP_MINUTES"].flatMap { Int64($0) }.map { max(1, min($0, 1_440)) } ?? 30
    }

    @Test(arguments: seeds)
    func aVoyageKeepsEveryFixAndDeliversItInOrder(seed: UInt64) async throws {
        let report = try await VoyageSimulation(
            days: Self.days, seed: seed, stepMinutes: Self.stepMinutes,
            alone: Self.environment["GEORELAY_SIM_SEED"] != nil
        ).run()
        print("simulation: \(report)")
        #expect(
            report.problems.isEmpty,
            "seed \(seed) (rerun: make simulate DAYS=\(Self.days) SEED=\(seed) STEP=\(Self.stepMinutes)): \(report)")
        #expect(report.delivered >= report.stored, "every fix stored reached the server: \(report)")
    }
}

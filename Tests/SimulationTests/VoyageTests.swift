import Foundation
import GeoRelayTestTraits
import Testing

/// A voyage on simulated time (issue 37 §2), several seeds in `make test`; any length and seed
/// with `make simulate DAYS=… SEED=…` (GEORELAY_SIM_DAYS, GEORELAY_SIM_SEED).
@Suite(.longOffThePool) struct VoyageTests {
    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    static var seeds: [UInt64] {
        if let seed = environment["GEORELAY_SIM_SEED"].flatMap({ UInt64($0) }) { return [seed] }
        return [1, 2, 3]
    }

    /// Ten days in `make test` (each seed's month budget spent halfway, as a month's is), thirty
    /// with `GEORELAY_LONG_TESTS=1`.
    static var days: Int {
        environment["GEORELAY_SIM_DAYS"].flatMap { Int($0) }.map { max(1, min($0, 3_650)) }
            ?? (environment["GEORELAY_LONG_TESTS"] != nil ? 30 : 10)
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

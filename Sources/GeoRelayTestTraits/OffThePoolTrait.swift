import GeoRelayTestKit
import Testing

/// Runs each test of a suite on `BlockingTestExecutor`, so that the shared pool's few threads
/// are left to the relay's own tasks, as they are in production, and only as many tests at
/// once as `TestAdmission` lets in.
///
/// Tests wait for child processes, blocking sockets and heartbeats on purpose; on the shared
/// pool two such waits at once stalled every other test and every forwarder running in
/// process (a push forwarder sent nothing for 30 s). Every suite carries this trait
/// (`Tests/Lint/suites_off_the_pool.py`, in `make lint`).
package struct OffThePoolTrait: SuiteTrait, TestTrait, TestScoping {
    package var isRecursive: Bool { true }
    /// One of the suite's longest tests: admitted before the others waiting (`TestAdmission`).
    var long = false

    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // A suite's own scope holds no place: its tests take theirs, one each.
        guard testCase != nil else { return try await function() }
        try await TestAdmission.shared.admitted(
            long: long, name: test.id.description
        ) {
            try await withTaskExecutorPreference(BlockingTestExecutor.shared) { try await function() }
        }
    }
}

extension Trait where Self == OffThePoolTrait {
    /// The suite's tests run off the shared pool (see `OffThePoolTrait`).
    package static var offThePool: Self { Self() }

    /// As `offThePool`, for a suite of long tests, admitted before the others waiting so that
    /// they run beside the short ones rather than alone at the end.
    package static var longOffThePool: Self { Self(long: true) }
}

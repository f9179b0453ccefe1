import Foundation
import Glibc
import Synchronization

/// The test process's environment, changed only under one lock that every child launch holds.
///
/// Tests run in parallel threads of one process. `setenv` may move glibc's `environ` while
/// another thread copies it for a child (`Process.run`, `ProcessInfo.environment`): a test run
/// crashed so, inside `Process.run`, once the integration tests stopped queueing for the shared
/// pool's two threads. A variable is set once per value, and each launch and each read of the
/// whole environment waits for a change in progress.
package enum TestEnvironment {
    private static let lock = Mutex(())

    /// Sets `name` unless it already holds `value`.
    package static func set(_ name: String, _ value: String) {
        lock.withLock { _ in
            if let current = getenv(name), String(cString: current) == value { return }
            setenv(name, value, 1)
        }
    }

    /// The whole environment, read while no one changes it.
    package static var current: [String: String] {
        lock.withLock { _ in ProcessInfo.processInfo.environment }
    }

    /// Starts a child process while no one changes the environment it inherits.
    package static func launch(_ process: Process) throws {
        try lock.withLock { _ in try process.run() }
    }
}

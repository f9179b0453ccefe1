import GeoRelayCore
import Glibc

/// Runs blocking `body` on a thread of its own and awaits its result, so that SQLite
/// reads, a collector's loop or a socket's blocking sends never hold one of the
/// cooperative pool's few threads (two on a two-core machine).
package func onDedicatedThread<T: Sendable>(named name: String, _ body: @escaping @Sendable () throws -> T) async throws
    -> T
{
    try await withCheckedThrowingContinuation { continuation in
        startThread(named: name) { continuation.resume(with: Result { try body() }) }
    }
}

/// The non-throwing form.
package func onDedicatedThread<T: Sendable>(named name: String, _ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        startThread(named: name) { continuation.resume(returning: body()) }
    }
}

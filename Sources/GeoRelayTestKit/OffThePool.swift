import Foundation

/// Runs a long, CPU-bound or blocking piece of a test on a thread of its own and awaits it.
///
/// Swift Testing runs tests on the cooperative pool, which has one thread per core: on a
/// 2-core machine two such tests at once (the gpsd comparison, the fuzz corpus) would hold every
/// thread for most of a minute, and every other test's awaits, and the in-process forwarders
/// they drive, would wait with them.
package func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.stackSize = 8 << 20
        thread.start()
    }
}

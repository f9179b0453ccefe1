import Dispatch
import Synchronization

/// A one-slot wake-up: `signal()` from any thread, `wait(timeout:)` from one task.
///
/// Signals while nobody waits are remembered (at most one), so a waiter that
/// was busy still wakes at once. Unlike an `AsyncStream`, a wait can end by
/// timeout or cancellation without finishing the signal for good.
package final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
        var generation = 0
    }

    private let state = Mutex(State())

    package init() {}

    package func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Forgets a remembered signal (one that arrived while nobody waited).
    package func clear() {
        state.withLock { $0.pending = false }
    }

    /// Returns when signalled, when `timeout` passes, or when the task is cancelled.
    package func wait(timeout: Duration? = nil) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let generation = state.withLock { state -> Int? in
                    if state.pending || Task.isCancelled {
                        state.pending = false
                        return nil
                    }
                    state.generation += 1
                    state.waiter = continuation
                    return state.generation
                }
                guard let generation else {
                    continuation.resume()
                    return
                }
                if let timeout {
                    let (seconds, attoseconds) = timeout.components
                    // At most a day: nothing waits longer, and a longer Duration would overflow nanoseconds.
                    let nanoseconds = max(
                        0, Int(min(max(seconds, 0), 86_400)) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
                    DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) { [self] in
                        expire(generation)
                    }
                }
            }
        } onCancel: {
            expire(nil)
        }
    }

    /// Returns when signalled, when `timeout` has passed on `clock`, or when the task is cancelled:
    /// a wait a test or a simulation ends by moving the clock.
    package func wait(timeout: Duration, clock: any RelayClock) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await clock.sleep(for: timeout) }
            group.addTask { await self.wait() }
            await group.next()
            group.cancelAll()
        }
    }

    private func expire(_ generation: Int?) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter, generation == nil || generation == state.generation else { return nil }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }
}

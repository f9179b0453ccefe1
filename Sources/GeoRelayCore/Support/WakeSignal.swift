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
        /// The waiter's `WaitMark`: ended by the signal itself, before the waiter runs again.
        var mark: WaitMark?
    }

    private let state = Mutex(State())

    package init() {}

    package func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                state.mark?.end()
                state.mark = nil
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

    /// Whether a signal arrived while nobody waited, forgetting it: for a loop that looks between
    /// blocking calls of its own rather than waiting here.
    package func takePending() -> Bool {
        state.withLock { state in
            defer { state.pending = false }
            return state.pending
        }
    }

    /// Returns when signalled, when `timeout` passes on the system's clock, or when the task is
    /// cancelled.
    package func wait(timeout: Duration) async {
        await wait(timeout: timeout, clock: SystemClock())
    }

    /// Returns when signalled or when the task is cancelled.
    package func wait() async {
        let mark = WaitMark.current
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waits = state.withLock { state -> Bool in
                    if state.pending || Task.isCancelled {
                        state.pending = false
                        return false
                    }
                    state.waiter = continuation
                    state.mark = mark
                    mark?.begin()
                    return true
                }
                if !waits { continuation.resume() }
            }
        } onCancel: {
            expire()
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

    private func expire() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer {
                state.waiter = nil
                state.mark = nil
            }
            return state.waiter
        }
        waiter?.resume()
    }
}

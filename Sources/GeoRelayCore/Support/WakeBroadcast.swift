import Synchronization

/// One event, many waiters: each subscriber has its own `WakeSignal`, which remembers one
/// pending wake, so a waiter that was busy looks once however many events came meanwhile. No
/// polling, so an idle relay uses no CPU.
package final class WakeBroadcast: Sendable {
    private let subscribers = Mutex<[WakeSignal]>([])

    package init() {}

    package func subscribe() -> WakeSignal {
        let signal = WakeSignal()
        subscribers.withLock { $0.append(signal) }
        return signal
    }

    package func unsubscribe(_ signal: WakeSignal) {
        subscribers.withLock { $0.removeAll { $0 === signal } }
    }

    package func signal() {
        for subscriber in subscribers.withLock({ $0 }) { subscriber.signal() }
    }

    /// Wakes every subscriber one last time (the source is closing).
    package func finish() {
        signal()
    }
}

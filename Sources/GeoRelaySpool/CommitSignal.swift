import GeoRelayCore
import Synchronization

/// Wakes the forwarders when new positions are committed.
///
/// Each subscriber has its own `WakeSignal` that remembers one pending wake:
/// a forwarder that was busy reads the spool once, however many commits
/// happened meanwhile. No polling, so an idle relay uses no CPU.
package final class CommitSignal: Sendable {
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

    /// Wakes every subscriber one last time (the spool is closing).
    package func finish() {
        signal()
    }
}

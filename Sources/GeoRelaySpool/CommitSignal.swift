import Synchronization

/// Wakes the forwarders when new positions are committed.
///
/// Each subscriber gets an `AsyncStream` that buffers at most one pending
/// signal: a forwarder that was busy reads the spool once, however many
/// commits happened meanwhile. No polling, so an idle relay uses no CPU.
package final class CommitSignal: Sendable {
    private let subscribers = Mutex<[Int: AsyncStream<Void>.Continuation]>([:])
    private let nextID = Atomic<Int>(0)

    package init() {}

    package func subscribe() -> AsyncStream<Void> {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: id) }
        }
        subscribers.withLock { $0[id] = continuation }
        return stream
    }

    package func signal() {
        subscribers.withLock { subscribers in
            for continuation in subscribers.values { continuation.yield() }
        }
    }

    package func finish() {
        let all = subscribers.withLock { subscribers in
            defer { subscribers.removeAll() }
            return Array(subscribers.values)
        }
        for continuation in all { continuation.finish() }
    }
}

import Dispatch

/// A non-thread-safe resource (a SQLite connection, a curl handle) confined
/// to its own serial queue, so blocking C calls never run on Swift's
/// cooperative pool (GRDB gives each connection a serial queue the same way).
package final class QueueConfined<Resource>: @unchecked Sendable {
    private let queue: DispatchQueue
    private let resource: Resource

    package init(label: String, _ resource: Resource) {
        self.queue = DispatchQueue(label: label)
        self.resource = resource
    }

    /// Runs `body` with the resource on its queue and waits for the result.
    package func run<T: Sendable>(_ body: @escaping @Sendable (Resource) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try body(self.resource) })
            }
        }
    }

    /// The non-throwing form.
    package func run<T: Sendable>(_ body: @escaping @Sendable (Resource) -> T) async -> T {
        await withCheckedContinuation { continuation in
            queue.async {
                continuation.resume(returning: body(self.resource))
            }
        }
    }
}

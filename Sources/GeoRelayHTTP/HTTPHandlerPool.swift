import Dispatch
import GeoRelayCore
import Glibc
import Synchronization

/// The threads that run an HTTP listener's handler, so a handler that blocks (a phone's
/// answer waits for the spool's commit, a scrape reads SQLite) never holds the event loop.
///
/// A fixed number of threads: at most that many requests are with a handler at once and the
/// rest wait in order, so a burst of requests costs queue entries, not threads.
final class HTTPHandlerPool: Sendable {
    struct Job: Sendable {
        var connection: UInt64
        var request: HTTPServerRequest
    }

    private struct Queue {
        var jobs: [Job] = []
        var stopping = false
    }

    private let queue = Mutex(Queue())
    private let available = DispatchSemaphore(value: 0)
    private let threads: Int
    private let name: String
    private let handler: @Sendable (HTTPServerRequest) -> HTTPServerResponse
    private let complete: @Sendable (UInt64, HTTPServerResponse) -> Void

    /// `threads` threads, once started, each running `handler` and passing its answer to `complete`.
    init(
        threads: Int, name: String, handler: @escaping @Sendable (HTTPServerRequest) -> HTTPServerResponse,
        complete: @escaping @Sendable (UInt64, HTTPServerResponse) -> Void
    ) {
        precondition(threads > 0, "an HTTP listener needs at least one handler thread")
        self.threads = threads
        self.name = name
        self.handler = handler
        self.complete = complete
    }

    /// Starts the threads (the loop does, as it starts). Once only.
    func start() {
        for index in 0..<threads {
            startThread(named: "\(name)-\(index)") { [self] in
                while let job = next() {
                    complete(job.connection, handler(job.request))
                }
            }
        }
    }

    func submit(_ job: Job) {
        queue.withLock { $0.jobs.append(job) }
        available.signal()
    }

    /// Ends the threads once they finish what they run; jobs not started are dropped.
    func stop() {
        queue.withLock { $0.stopping = true }
        for _ in 0..<threads { available.signal() }
    }

    private func next() -> Job? {
        while true {
            available.wait()
            let job = queue.withLock { queue -> Job?? in
                if queue.stopping { return .some(nil) }
                return queue.jobs.isEmpty ? nil : queue.jobs.removeFirst()
            }
            if let job { return job }
        }
    }
}

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

/// An executor for tests whose bodies block a thread on purpose: waiting for a child relay to
/// bind or exit, a one-shot command to finish, a blocking socket to answer.
///
/// Swift's shared pool has one thread per core and does not grow when one of them blocks
/// (measured here: eight tasks that each block for a second take four seconds on two cores).
/// A few integration tests waiting for their relays at once would hold both threads, and every
/// other test's awaits, and the forwarders that tests run in process, would stall with them:
/// a push forwarder test once timed out after 30 s this way without having sent anything.
/// Jobs here run on threads of this executor's own, and a new thread starts whenever every
/// existing one is busy (up to a bound), so a blocked test holds only the thread it blocks.
package final class BlockingTestExecutor: TaskExecutor, @unchecked Sendable {
    package static let shared = BlockingTestExecutor()

    /// At most this many threads: a bound against a runaway, far above what the admitted tests
    /// (`TestAdmission`) block at once, so that an admitted test never waits for a thread.
    private let maxThreads: Int
    /// Guards `jobs`, `idle` and `threads`; idle threads wait on it.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var idle = 0
    private var threads = 0

    package init(maxThreads: Int = 256) {
        self.maxThreads = maxThreads
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        let spawn = jobs.count > idle && threads < maxThreads
        if spawn { threads += 1 }
        condition.signal()
        condition.unlock()
        if spawn {
            let thread = Thread { [self] in work() }
            thread.stackSize = 8 << 20
            thread.start()
        }
    }

    private func work() {
        while true {
            condition.lock()
            while jobs.isEmpty {
                idle += 1
                condition.wait()
                idle -= 1
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// How many tests run at once: each admitted test has threads of its own, and the rest wait
/// (suspended, holding nothing) for a place.
///
/// Tests of this kind start relays, fakes and browsers, and many of them measure an interval
/// (keep-alives a second apart, a probe within a window, an answer within a timeout). Run all
/// at once on two cores, every one of them is starved and those intervals stretch until they
/// fail; run through a few threads, a test waits for a thread instead and the same happens.
/// A fixed number of tests at a time, each with all the threads it needs, keeps both bounded.
/// Three per core keeps both cores busy (many tests wait on real time or a child process most of
/// their run: two per core left a third of the machine idle). `GEORELAY_TEST_PARALLEL` overrides it.
package actor TestAdmission {
    package static let shared = TestAdmission(
        places: {
            if let text = ProcessInfo.processInfo.environment["GEORELAY_TEST_PARALLEL"], let places = Int(text),
                places > 0
            {
                return places
            }
            return 3 * ProcessInfo.processInfo.activeProcessorCount
        }())

    private var free: Int
    /// Who waits for a place: the long tests, then the rest, each first come first served.
    private var waiting: (long: [CheckedContinuation<Void, Never>], rest: [CheckedContinuation<Void, Never>]) = ([], [])

    package init(places: Int) {
        free = places
    }

    /// Runs `body` once a place is free. A `long` test (one of the suite's longest chains: the
    /// voyage, the power cuts) goes before the others waiting, so that the suite does not end
    /// with it running alone on a machine where everything else has finished: started first, it
    /// runs beside the many short tests instead.
    ///
    /// With `GEORELAY_TEST_TIMES` naming a file, each test's time once admitted (its own run, not
    /// its wait for a place) is appended to it as `seconds<TAB>name`: the suite's profile.
    package nonisolated func admitted<T: Sendable>(
        long: Bool = false, name: @autoclosure () -> String = "", _ body: () async throws -> T
    ) async rethrows -> T {
        await enter(long: long)
        let start = ContinuousClock.now
        defer { Self.record(name(), ContinuousClock.now - start) }
        do {
            let value = try await body()
            await leave()
            return value
        } catch {
            await leave()
            throw error
        }
    }

    private static let timesFile = ProcessInfo.processInfo.environment["GEORELAY_TEST_TIMES"]
    private static let timesLock = NSLock()

    private static func record(_ name: String, _ took: Duration) {
        guard let timesFile, !name.isEmpty else { return }
        let (seconds, attoseconds) = took.components
        let line = String(format: "%.3f\t%@\n", Double(seconds) + Double(attoseconds) / 1e18, name)
        timesLock.lock()
        defer { timesLock.unlock() }
        guard
            let handle = FileHandle(forWritingAtPath: timesFile)
                ?? {
                    FileManager.default.createFile(atPath: timesFile, contents: nil)
                    return FileHandle(forWritingAtPath: timesFile)
                }()
        else { return }
        handle.seekToEndOfFile()
        handle.write(Data(line.utf8))
        try? handle.close()
    }

    private func enter(long: Bool) async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation {
            if long { waiting.long.append($0) } else { waiting.rest.append($0) }
        }
    }

    private func leave() {
        if !waiting.long.isEmpty {
            waiting.long.removeFirst().resume()
        } else if !waiting.rest.isEmpty {
            waiting.rest.removeFirst().resume()
        } else {
            free += 1
        }
    }
}

import FoundationEssentials
import Synchronization

/// The relay's time as a value handed to the parts that need it, so that behaviour over time
/// (backoff, parks, budgets, refreshes, retention) runs as well on a clock a test or a simulation
/// moves as on the system's (issue 37). Parts still reading the system clock themselves are
/// listed, and held to it, by `Tests/Lint/clock_reads.py`.
package protocol RelayClock: Sendable {
    /// Wall time, milliseconds since 1970-01-01T00:00:00Z: it may be stepped either way.
    func nowMs() -> Int64
    /// Monotonic time in nanoseconds, for durations: it never goes back.
    func monotonicNs() -> UInt64
    /// Returns once the monotonic time has reached `deadlineNs`, or the task is cancelled.
    func sleep(untilNs deadlineNs: UInt64) async
    /// Which run of the monotonic clock this is (the machine's boot): an age kept on disk as a
    /// monotonic reading holds across restarts of the relay with the same boot, whatever the
    /// wall clock did meanwhile; nil where it cannot be known.
    func bootID() -> String?
}

/// A point on a `RelayClock`'s monotonic time: what deadlines, answers' arrivals and a backfill's
/// start are timed in, so a simulated clock times them as the system's does.
package struct RelayInstant: Comparable, Hashable, Sendable {
    /// Since the clock's origin (its monotonic zero).
    package var sinceOrigin: Duration

    package init(sinceOrigin: Duration) {
        self.sinceOrigin = sinceOrigin
    }

    /// The clock's origin: a placeholder for "never", earlier than any reading.
    package static let origin = RelayInstant(sinceOrigin: .zero)

    package static func < (lhs: RelayInstant, rhs: RelayInstant) -> Bool { lhs.sinceOrigin < rhs.sinceOrigin }
    package static func + (lhs: RelayInstant, rhs: Duration) -> RelayInstant {
        RelayInstant(sinceOrigin: lhs.sinceOrigin + rhs)
    }
    package static func += (lhs: inout RelayInstant, rhs: Duration) { lhs = lhs + rhs }
    package static func - (lhs: RelayInstant, rhs: Duration) -> RelayInstant {
        RelayInstant(sinceOrigin: lhs.sinceOrigin - rhs)
    }
    package static func - (lhs: RelayInstant, rhs: RelayInstant) -> Duration { lhs.sinceOrigin - rhs.sinceOrigin }
    package func duration(to other: RelayInstant) -> Duration { other.sinceOrigin - sinceOrigin }
}

extension RelayClock {
    /// The monotonic time in milliseconds: for the deadlines and ages kept as integers (heartbeats,
    /// sessions, listeners). Always within `Int64` (`UInt64.max` ns is 1.8e13 ms).
    package func monotonicMs() -> Int64 {
        Int64(monotonicNs() / 1_000_000)
    }

    /// The monotonic time now, as an instant to do arithmetic on with durations.
    package func now() -> RelayInstant {
        RelayInstant(sinceOrigin: .nanoseconds(Int64(clamping: monotonicNs())))
    }

    /// Returns after `duration` of this clock's monotonic time (at once for none or less).
    package func sleep(for duration: Duration) async {
        let now = monotonicNs()
        let span = Self.nanoseconds(duration)
        await sleep(untilNs: now > UInt64.max - span ? .max : now + span)
    }

    /// Wall time as of now, advanced from here by the monotonic clock alone: it never jumps,
    /// whatever NTP or an operator does to the wall clock. For schedules that span hours (the push
    /// token's refresh) and must neither fire early nor hours late.
    package func steadyWall() -> @Sendable () -> Int64 {
        let (originMs, originNs) = (nowMs(), monotonicNs())
        return { [self] in originMs.saturatingPlus(Int64(clamping: (monotonicNs() &- originNs) / 1_000_000)) }
    }

    /// `duration` in nanoseconds, 0 for a negative one, `UInt64.max` for one too long to count.
    package static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0, duration > .zero else { return 0 }
        let whole = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        guard !whole.overflow else { return .max }
        let sum = whole.partialValue.addingReportingOverflow(UInt64(max(0, attoseconds / 1_000_000_000)))
        return sum.overflow ? .max : sum.partialValue
    }
}

/// The system's clocks: what the daemon runs on.
package struct SystemClock: RelayClock {
    package init() {}
    package func nowMs() -> Int64 { WallClock.nowMs() }
    package func monotonicNs() -> UInt64 { WallClock.monotonicNs() }
    /// The kernel's, which CLOCK_MONOTONIC counts from.
    package func bootID() -> String? { Self.boot }
    private static let boot = FileManager.default.contents(atPath: "/proc/sys/kernel/random/boot_id")
        .map { String(decoding: $0, as: UTF8.self).trimmingWhitespace }.flatMap { $0.isEmpty ? nil : $0 }
    package func sleep(untilNs deadlineNs: UInt64) async {
        let now = WallClock.monotonicNs()
        guard deadlineNs > now else { return }
        try? await Task.sleep(for: .nanoseconds(Int64(clamping: deadlineNs - now)))
    }
}

/// A clock that moves only when told: for tests and the simulation. Moving it wakes every
/// sleeper whose deadline it reached, in deadline order; stepping the wall clock (NTP at sea, an
/// operator) moves wall time alone.
package final class SimulatedClock: RelayClock {
    private struct State {
        var wallMs: Int64
        var monotonicNs: UInt64 = 1_000_000_000
        /// `task`: a task's `sleep`, which counts in `resuming` from its wake until it runs.
        var sleepers: [(deadlineNs: UInt64, id: UInt64, task: Bool, wake: @Sendable () -> Void)] = []
        var nextID: UInt64 = 0
        var resuming = 0

        /// Takes the sleepers `take` picks, in deadline order, counting the tasks among them as resuming.
        mutating func remove(where take: (UInt64, UInt64) -> Bool) -> [@Sendable () -> Void] {
            let woken = sleepers.filter { take($0.deadlineNs, $0.id) }.sorted { $0.deadlineNs < $1.deadlineNs }
            sleepers.removeAll { take($0.deadlineNs, $0.id) }
            resuming += woken.count { $0.task }
            return woken.map(\.wake)
        }
    }

    private let state: Mutex<State>
    private let boot: String

    /// Starts at `wallMs` (wall time) with a monotonic clock of its own.
    package convenience init(wallMs: Int64) {
        self.init(wallMs: wallMs, boot: "simulated")
    }

    /// The same, its monotonic clock's run (the machine's boot) named `boot`.
    package init(wallMs: Int64, boot: String) {
        state = Mutex(State(wallMs: wallMs))
        self.boot = boot
    }

    package func bootID() -> String? { boot }

    package func nowMs() -> Int64 { state.withLock { $0.wallMs } }
    package func monotonicNs() -> UInt64 { state.withLock { $0.monotonicNs } }

    /// How many tasks are asleep on it: a test moves the clock once the part it drives waits.
    package var sleeping: Int { state.withLock { $0.sleepers.count } }

    /// How many tasks it woke that have not run since: a task resumed is only scheduled, and under
    /// load may run milliseconds later, so a test that moves the clock while one is pending would
    /// move it past what that task was about to do.
    package var resuming: Int { state.withLock { $0.resuming } }

    /// The earliest deadline a sleeper waits for: where a test that moves the clock from one thing
    /// that happens to the next goes.
    package var nextDeadlineNs: UInt64? { state.withLock { $0.sleepers.map(\.deadlineNs).min() } }

    /// A sleeper that is not a task (a thread blocked on the simulated network): `wake` is called
    /// once the clock reaches `deadlineNs` (at once if it has), unless `cancel`led first.
    /// - Returns: what `cancel` takes.
    package func schedule(atNs deadlineNs: UInt64, _ wake: @escaping @Sendable () -> Void) -> UInt64 {
        let (id, now) = state.withLock { state -> (UInt64, Bool) in
            state.nextID += 1
            if deadlineNs <= state.monotonicNs { return (state.nextID, true) }
            state.sleepers.append((deadlineNs, state.nextID, false, wake))
            return (state.nextID, false)
        }
        if now { wake() }
        return id
    }

    /// Takes a sleeper `schedule` added off the clock, unwoken.
    package func cancel(_ id: UInt64) {
        _ = state.withLock { state in state.remove { $1 == id } }
    }

    package func sleep(untilNs deadlineNs: UInt64) async {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        let mark = WaitMark.current
        let woken = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let now: Bool = state.withLock { state in
                    if deadlineNs <= state.monotonicNs || Task.isCancelled { return true }
                    // Registered under the lock, so a move of the clock sees the part waiting.
                    mark?.begin()
                    state.sleepers.append(
                        (
                            deadlineNs, id, true,
                            {
                                mark?.end()
                                continuation.resume(returning: true)
                            }
                        ))
                    return false
                }
                if now { continuation.resume(returning: false) }
            }
        } onCancel: {
            for wake in state.withLock({ state in state.remove { $1 == id } }) { wake() }
        }
        if woken { state.withLock { $0.resuming -= 1 } }
    }

    /// Moves wall and monotonic time forward by `duration` and wakes the sleepers it reaches.
    package func advance(by duration: Duration) {
        let ns = Self.nanoseconds(duration)
        let due = state.withLock { state -> [@Sendable () -> Void] in
            state.wallMs = state.wallMs.saturatingPlus(Int64(ns / 1_000_000))
            state.monotonicNs = state.monotonicNs > UInt64.max - ns ? .max : state.monotonicNs + ns
            let now = state.monotonicNs
            return state.remove { deadline, _ in deadline <= now }
        }
        for wake in due { wake() }
    }

    /// Moves the clock forward to `deadlineNs` (not back), as `advance(by:)` does.
    package func advance(toNs deadlineNs: UInt64) {
        let now = monotonicNs()
        if deadlineNs > now { advance(by: .nanoseconds(Int64(clamping: deadlineNs - now))) }
    }

    /// Steps the wall clock alone (NTP correcting it, an operator setting it): durations go on.
    package func stepWall(byMs ms: Int64) {
        state.withLock { $0.wallMs = $0.wallMs.saturatingPlus(ms) }
    }
}

import Synchronization

/// When a loop last turned over: published by the loop, read by the relay's health monitor.
///
/// A loop beats on every turn, and a loop that waits for work beats each time its
/// wait returns, timeouts included (its wait is bounded by `Heartbeat.turnInterval`
/// or less), so an idle loop stays young as long as its wait keeps returning on time.
/// Only a loop stuck inside one turn (a blocked call, a sync that never ends) ages.
///
/// The time is the monotonic time of the clock the loop is handed: the system's
/// (`CLOCK_MONOTONIC`) in the daemon, which does not jump with the wall clock and is the same
/// for every process on the machine, so `georelay status` can judge a published beat against
/// its own clock; a test's or a simulation's, which ages a heartbeat only as far as it is moved.
package final class Heartbeat: Sendable {
    /// What beats, in a log line or a reply: "ingest loop", "spool writer".
    package let name: String
    /// Whose time a beat records and an age is measured on.
    package let clock: any RelayClock
    private let lastMs: Atomic<Int64>

    /// The longest a loop waits before it turns over on its own when the relay sets
    /// nothing shorter: well under any sensible watchdog interval.
    package static let turnInterval: Duration = .seconds(1)

    /// A heartbeat that has just beaten: a loop is young when it starts.
    package init(_ name: String, clock: any RelayClock = SystemClock()) {
        self.name = name
        self.clock = clock
        lastMs = Atomic(Self.nowMs(clock))
    }

    /// Records a turn. Cheap (one clock read, one relaxed store): loops call it on every turn.
    package func beat() {
        lastMs.store(Self.nowMs(clock), ordering: .relaxed)
    }

    /// The monotonic time of the last turn, in milliseconds.
    package var lastBeatMs: Int64 { lastMs.load(ordering: .relaxed) }

    /// How long ago the last turn was (never negative).
    package func ageMs() -> Int64 {
        max(0, Self.nowMs(clock) - lastBeatMs)
    }

    private static func nowMs(_ clock: any RelayClock) -> Int64 { clock.monotonicMs() }
}

extension Duration {
    /// The duration in whole milliseconds (rounded down), for the loops' millisecond timeouts.
    package var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}

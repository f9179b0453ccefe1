import Synchronization

/// When a loop last turned over: published by the loop, read by the relay's health monitor.
///
/// A loop beats on every turn, and a loop that waits for work beats each time its
/// wait returns, timeouts included (its wait is bounded by `Heartbeat.turnInterval`
/// or less), so an idle loop stays young as long as its wait keeps returning on time.
/// Only a loop stuck inside one turn (a blocked call, a sync that never ends) ages.
///
/// The time is the monotonic clock's (`CLOCK_MONOTONIC`): it does not jump with the wall
/// clock, and it is the same for every process on the machine, so `georelay status`
/// can judge a published beat against its own clock.
package final class Heartbeat: Sendable {
    /// What beats, in a log line or a reply: "ingest loop", "spool writer".
    package let name: String
    private let lastMs: Atomic<Int64>

    /// The longest a loop waits before it turns over on its own when the relay sets
    /// nothing shorter: well under any sensible watchdog interval.
    package static let turnInterval: Duration = .seconds(1)

    package init(_ name: String, nowMs: Int64 = WallClock.monotonicMs()) {
        self.name = name
        lastMs = Atomic(nowMs)
    }

    /// Records a turn. Cheap (one relaxed store): loops call it on every turn.
    package func beat(nowMs: Int64 = WallClock.monotonicMs()) {
        lastMs.store(nowMs, ordering: .relaxed)
    }

    /// The monotonic time of the last turn, in milliseconds.
    package var lastBeatMs: Int64 { lastMs.load(ordering: .relaxed) }

    /// How long ago the last turn was (never negative).
    package func ageMs(nowMs: Int64 = WallClock.monotonicMs()) -> Int64 {
        max(0, nowMs - lastBeatMs)
    }
}

extension Duration {
    /// The duration in whole milliseconds (rounded down), for the loops' millisecond timeouts.
    package var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}

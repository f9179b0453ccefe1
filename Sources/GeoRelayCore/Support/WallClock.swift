import Glibc

/// The relay's clocks: the wall clock in milliseconds since the epoch, the monotonic clock,
/// and the steady and latest views that survive the wall clock being stepped.
package enum WallClock {
    package static func nowMs() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// A monotonic clock in nanoseconds, for durations that must not jump with NTP.
    package static func monotonicNs() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// The monotonic clock `seconds` from now (at most a day; none for a negative or NaN), as the
    /// absolute deadline a condition variable on `CLOCK_MONOTONIC` waits until.
    package static func monotonicDeadline(after seconds: Double) -> timespec {
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let bounded = seconds.isFinite ? min(max(0, seconds), 86_400) : 0
        let nanoseconds = Int(deadline.tv_nsec) + Int((bounded * 1e9).rounded())
        deadline.tv_sec += nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        return deadline
    }

    /// The monotonic clock in milliseconds: for timeouts and windows inside one process.
    package static func monotonicMs() -> Int64 { Int64(monotonicNs() / 1_000_000) }

    /// The wall clock and the monotonic clock at the first use (the relay's start).
    private static let origin = (wallMs: nowMs(), monotonicMs: monotonicMs())

    /// Wall-clock time as of the process's start, advanced by the monotonic clock: it never
    /// jumps, whatever NTP or an operator does to the wall clock. For schedules that span
    /// hours (the push token's refresh) and must neither fire early nor hours late.
    package static func steadyMs() -> Int64 { origin.wallMs + (monotonicMs() - origin.monotonicMs) }

    /// The wall clock, except that a step back since the start is ignored: what the future-fix
    /// check compares against, so collectors that were right all along are not refused when the
    /// relay's clock is set back.
    package static func latestMs() -> Int64 { max(nowMs(), steadyMs()) }

    /// Before this (2025-01-01) the relay's clock has never been set (a box without a
    /// real-time clock, booted offline): it cannot judge a fix time "in the future".
    package static let plausibleMs: Int64 = 1_735_689_600_000
}

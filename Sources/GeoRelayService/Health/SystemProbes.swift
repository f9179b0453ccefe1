import CLinux
import FoundationEssentials
import GeoRelayCore
import Glibc
import Synchronization

/// Free space on a filesystem, as an unprivileged process may use it.
package struct DiskSpace: Sendable, Equatable {
    package var availableBytes: Int64
    package var totalBytes: Int64

    package init(availableBytes: Int64, totalBytes: Int64) {
        self.availableBytes = availableBytes
        self.totalBytes = totalBytes
    }

    /// statvfs(3) of the directory holding `path` (the spool's filesystem).
    package static func of(directoryOf path: String) -> Result<DiskSpace, DiskSpaceError> {
        let directory = Paths.directory(of: path)
        let target = directory.isEmpty ? "." : directory
        var available: UInt64 = 0
        var total: UInt64 = 0
        guard georelay_filesystem_space(target, &available, &total) == 0 else {
            return .failure(DiskSpaceError(message: "statvfs \(target): \(String(cString: strerror(errno)))"))
        }
        return .success(DiskSpace(availableBytes: Int64(clamping: available), totalBytes: Int64(clamping: total)))
    }
}

package struct DiskSpaceError: Error, Sendable, Equatable {
    package var message: String
}

/// What the kernel says about the system clock's discipline (adjtimex(2), read-only).
package enum ClockSync: Sendable, Equatable {
    /// An NTP daemon (chrony, ntpd, systemd-timesyncd) keeps it; the kernel's bound on its error.
    case synchronised(maxErrorMs: Int64)
    /// STA_UNSYNC: nothing has disciplined the clock lately.
    case unsynchronised(maxErrorMs: Int64)
    /// adjtimex failed (a seccomp filter such as systemd's `ProtectClock=`) or was not asked.
    case unknown(String)

    /// The kernel's answer (a test's stands in through `FaultInjection.clockSync`).
    package static func read() -> ClockSync {
        let state = georelay_read_clock()
        if state.state < 0 { return .unknown("adjtimex: \(String(cString: strerror(state.error)))") }
        let maxErrorMs = Int64(state.maxerror_us) / 1000
        // TIME_ERROR (5) is what adjtimex answers while STA_UNSYNC is set.
        return state.unsynchronised != 0 || state.state == 5
            ? .unsynchronised(maxErrorMs: maxErrorMs) : .synchronised(maxErrorMs: maxErrorMs)
    }
}

/// A step of the wall clock while the relay ran: how far, and when (wall time after it).
package struct ClockJump: Sendable, Equatable {
    package var byMs: Int64
    package var atMs: Int64

    package init(byMs: Int64, atMs: Int64) {
        self.byMs = byMs
        self.atMs = atMs
    }
}

/// Notices steps of the wall clock by comparing how far it moved with how far the monotonic
/// clock moved since the last look; the health monitor looks on every check (about once a
/// second), so a comparison costs two clock reads.
///
/// A slew (NTP's gradual correction, at most 0.5 ms per second) never reaches the threshold;
/// a step (NTP at a cold start, an operator's `date -s`) does. The last step is kept for
/// `status` until the relay restarts.
package final class ClockJumpDetector: Sendable {
    /// A difference smaller than this between the two clocks' progress is not a jump.
    package static let thresholdMs: Int64 = 2000

    private struct State {
        var lastWallMs: Int64?
        var lastMonotonicMs: Int64 = 0
        var lastJump: ClockJump?
    }

    private let state = Mutex(State())

    package init() {}

    /// Compares this look with the previous one; returns the last jump seen (this one or an earlier one).
    @discardableResult
    package func observe(wallMs: Int64, monotonicMs: Int64) -> ClockJump? {
        state.withLock { state in
            if let lastWall = state.lastWallMs {
                let drift = (wallMs - lastWall) - (monotonicMs - state.lastMonotonicMs)
                if abs(drift) >= Self.thresholdMs { state.lastJump = ClockJump(byMs: drift, atMs: wallMs) }
            }
            state.lastWallMs = wallMs
            state.lastMonotonicMs = monotonicMs
            return state.lastJump
        }
    }

    package var lastJump: ClockJump? { state.withLock { $0.lastJump } }
}

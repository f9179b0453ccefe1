import GeoRelayCore
import Synchronization

/// A clock the test moves by hand: both the wall and the monotonic clock, in milliseconds.
final class ManualClock: Sendable {
    private let wall: Mutex<Int64>
    private let monotonic = Mutex<Int64>(0)

    /// Starts at 2026-07-25T04:30:00Z.
    init(wallMs: Int64 = 1_784_953_800_000) {
        wall = Mutex(wallMs)
    }

    func advance(ms: Int64) {
        wall.withLock { $0 += ms }
        monotonic.withLock { $0 += ms }
    }

    var ingestClock: IngestClock {
        IngestClock(wallMs: { self.wall.withLock { $0 } }, monotonicMs: { self.monotonic.withLock { $0 } })
    }

    var monotonicMs: Int64 { monotonic.withLock { $0 } }
}

import Foundation
import GeoRelayCore
import Glibc
import Synchronization

/// Why this machine cannot run a program on faked time: no libfaketime or no C compiler.
package struct FakeTimeUnavailable: Error, CustomStringConvertible {
    package let reason: String
    package var description: String { reason }
}

/// A clock for real programs that the test moves forward: libfaketime (Debian's `faketime`)
/// preloaded with an offset the test rewrites, read afresh at every clock reading, for the wall
/// clock and the monotonic clocks alike, so that schedules on elapsed time (the push token's
/// 24 hours, the spool's upkeep, the uplink monitor's looks) see the steps too.
///
/// Between steps the faked clocks run at the real rate: a speed-up (`FAKETIME="+0 x1000"`)
/// divides every poll and epoll timeout libfaketime sees, so timeouts under a second become
/// busy loops, and it multiplies the relay's real round trips on loopback into timeouts. A step
/// is that much time passing at once: whatever was in flight has taken that long, and a part's
/// heartbeat looks that old to the watchdog until the part turns over again (it logs a stall).
///
/// libfaketime alone hangs a Swift program in its first `Task.sleep` once the monotonic clocks
/// are faked, or with them real once the wall clock is a day ahead: it converts libdispatch's
/// absolute timer deadlines (on `CLOCK_MONOTONIC` and `CLOCK_BOOTTIME`) as if they were on the
/// wall clock. The kit's
/// `Tests/Helpers/faketime/timers.c`, built here with the system's C compiler and preloaded
/// first, arms those timers for what is left on their own faked clock, 50 ms at most, so a sleep
/// ends within 50 ms of a step past its deadline.
package final class FakeTime: Sendable {
    /// The thread-safe build: the plain `libfaketime.so.1` reads the offset file into static
    /// buffers from every thread at once, and a reading taken while another thread parses a new
    /// offset can come out torn, earlier than one taken before it (the relay trapped on a
    /// monotonic difference that went negative). This one holds a lock around each reading.
    package static let library = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

    /// The C source of the timer shim, beside the other test helpers.
    package static let source: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tests/Helpers/faketime/timers.c").path

    private let directory: TemporaryDirectory
    private let shim: String
    private let offsetFile: String
    /// The faked clocks' lead over the real ones, in milliseconds.
    private let offset: Mutex<Int64>

    /// Builds the shim and sets the faked wall clock to `startMs`.
    package init(startMs: Int64) throws {
        guard access(Self.library, R_OK) == 0 else {
            throw FakeTimeUnavailable(reason: "\(Self.library) missing (make deps installs faketime)")
        }
        directory = try TemporaryDirectory()
        shim = directory.file("timers.so")
        offsetFile = directory.file("offset")
        offset = Mutex(0)
        try Self.build(into: shim, scratch: directory.path)
        try set(offsetMs: startMs - WallClock.nowMs())
    }

    /// What a program started with it needs in its environment (add to the relay's and to its commands').
    package var environment: [String: String] {
        // FAKETIME_NO_CACHE: the offset file is read at every clock reading, so a step is seen at once.
        ["LD_PRELOAD": "\(shim) \(Self.library)", "FAKETIME_TIMESTAMP_FILE": offsetFile, "FAKETIME_NO_CACHE": "1"]
    }

    /// The faked wall clock now, in milliseconds since 1970.
    package func nowMs() -> Int64 { WallClock.nowMs() + offset.withLock { $0 } }

    /// Moves the faked clocks forward by `duration` (wall and monotonic alike).
    package func advance(by duration: Duration) throws {
        let ms = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        precondition(ms >= 0, "the faked clocks only go forward here")
        try set(offsetMs: offset.withLock { $0 } + ms)
    }

    private func set(offsetMs: Int64) throws {
        // Written beside and renamed: a reader never sees half an offset.
        let text = String(format: "%+.3f\n", Double(offsetMs) / 1000)
        let temporary = offsetFile + ".new"
        try text.write(toFile: temporary, atomically: false, encoding: .utf8)
        guard rename(temporary, offsetFile) == 0 else {
            throw RelayProcessError(message: "rename \(temporary): \(String(cString: strerror(errno)))")
        }
        offset.withLock { $0 = offsetMs }
    }

    private static func build(into output: String, scratch: String) throws {
        let directories = (TestEnvironment.current["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        let candidates = ["cc", "clang", "gcc"].flatMap { name in directories.map { "\($0)/\(name)" } }
        guard let compiler = candidates.first(where: { access($0, X_OK) == 0 }) else {
            throw FakeTimeUnavailable(reason: "no C compiler (cc, clang or gcc) in PATH to build \(source)")
        }
        let result = try RelayProcess.run(
            compiler, ["-O2", "-Wall", "-shared", "-fPIC", "-o", output, source], directory: scratch)
        // A source that does not compile is the kit's own bug, not the machine's: fail.
        guard result.status == 0 else {
            throw RelayProcessError(message: "\(compiler) \(source) failed: \(result.stderr)")
        }
    }
}

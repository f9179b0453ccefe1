import CLinux
import FoundationEssentials
import GeoRelayCore
import Glibc

/// Judges the relay's loops by their heartbeats: what the watchdog, `/healthz` and
/// `georelay status` report.
///
/// The relay has two loops a position depends on: the ingest event loop (reads the
/// collectors, answers them) and the spool writer (commits). Each beats on every turn and
/// its waits are bounded (`turnInterval`), so a part whose last beat is older than
/// `stallAfter` is stuck inside one turn, not idle.
package struct HealthMonitor: Sendable {
    /// The timings, all derived from systemd's `WatchdogSec` when there is one.
    package struct Configuration: Sendable, Equatable {
        /// A part whose last turn is older than this is stalled.
        package var stallAfter: Duration = .seconds(30)
        /// The longest the loops wait before turning over on their own.
        package var turnInterval: Duration = Heartbeat.turnInterval
        /// How often the monitor judges the parts (and refreshes the health file).
        package var checkInterval: Duration = .seconds(1)
        /// How often `WATCHDOG=1` goes out while every part is alive; nil without a watchdog.
        package var keepAliveInterval: Duration?

        package init() {}

        /// Under systemd's watchdog: a part is stalled once its last turn is older than
        /// `WatchdogSec` (the brief systemd gives the whole process), keep-alives go every
        /// half of it, and the loops turn and the monitor checks at least four times per
        /// `WatchdogSec` (at most once a second), so a healthy part is never near the limit
        /// and a keep-alive is never more than three quarters of it late.
        package init(watchdogTimeout: Duration?) {
            guard let timeout = watchdogTimeout else { return }
            stallAfter = timeout
            keepAliveInterval = timeout / 2
            let quarter = max(timeout / 4, .milliseconds(10))
            turnInterval = min(Heartbeat.turnInterval, quarter)
            checkInterval = min(.seconds(1), quarter)
        }
    }

    /// One monitored part: its key (`ingest`, `writer`: JSON keys, metric labels) and heartbeat.
    package struct Part: Sendable {
        package var key: String
        package var heartbeat: Heartbeat

        package init(key: String, heartbeat: Heartbeat) {
            self.key = key
            self.heartbeat = heartbeat
        }
    }

    package let parts: [Part]
    package let configuration: Configuration
    /// The relay's, which the parts' heartbeats beat on: a report judges them at its now, and
    /// the watchdog checks at its pace.
    package let clock: any RelayClock
    /// Steps of the wall clock, noticed on each report (the watchdog asks about once a second).
    package let clockJumps = ClockJumpDetector()

    package init(parts: [Part], configuration: Configuration, clock: any RelayClock = SystemClock()) {
        self.parts = parts
        self.configuration = configuration
        self.clock = clock
    }

    /// The parts as of now on the monitor's clock, with the wall clock's last step.
    package func report() -> HealthReport {
        let nowMs = clock.monotonicMs()
        return HealthReport(
            parts: parts.map {
                HealthReport.Part(key: $0.key, name: $0.heartbeat.name, lastTurnMs: $0.heartbeat.lastBeatMs)
            },
            stallAfterMs: configuration.stallAfter.wholeMilliseconds, atMs: nowMs,
            clockJump: clockJumps.observe(wallMs: clock.nowMs(), monotonicMs: nowMs))
    }
}

/// The health of the relay's loops at one moment (monotonic milliseconds throughout).
package struct HealthReport: Sendable, Equatable {
    package struct Part: Sendable, Equatable {
        /// `ingest` or `writer`.
        package var key: String
        /// `ingest loop` or `spool writer`, for people.
        package var name: String
        /// When the part last turned over.
        package var lastTurnMs: Int64

        package init(key: String, name: String, lastTurnMs: Int64) {
            self.key = key
            self.name = name
            self.lastTurnMs = lastTurnMs
        }
    }

    package var parts: [Part]
    package var stallAfterMs: Int64
    /// The moment judged.
    package var atMs: Int64
    /// The wall clock's last step while the relay ran (nil: none seen).
    package var clockJump: ClockJump?

    package init(parts: [Part], stallAfterMs: Int64, atMs: Int64, clockJump: ClockJump? = nil) {
        self.parts = parts
        self.stallAfterMs = stallAfterMs
        self.atMs = atMs
        self.clockJump = clockJump
    }

    package func ageMs(_ part: Part) -> Int64 { max(0, atMs - part.lastTurnMs) }

    /// Alive: turned over within `stallAfterMs` (equal counts as alive).
    package func isAlive(_ part: Part) -> Bool { ageMs(part) <= stallAfterMs }

    package var isHealthy: Bool { parts.allSatisfy(isAlive) }

    package var stalled: [Part] { parts.filter { !isAlive($0) } }

    /// The same turns judged at another moment (`status` judges with its own clock).
    package func judged(atMs: Int64) -> HealthReport {
        HealthReport(parts: parts, stallAfterMs: stallAfterMs, atMs: atMs, clockJump: clockJump)
    }

    /// "ingest loop stalled: no turn for 3.2 s (limit 2 s)", one clause per stalled part; nil when healthy.
    package var problem: String? {
        let stalled = self.stalled
        guard !stalled.isEmpty else { return nil }
        return stalled.map {
            "\($0.name) stalled: no turn for \(HealthReport.seconds(ageMs($0))) (limit \(HealthReport.seconds(stallAfterMs)))"
        }
        .joined(separator: "; ")
    }

    /// Milliseconds as seconds, rounded up to a tenth ("0.3 s", "2 s", "2.1 s"; whole seconds
    /// from ten on), so an age past its limit never reads as the limit itself.
    package static func seconds(_ ms: Int64) -> String {
        if ms >= 10_000 { return "\((ms + 999) / 1000) s" }
        let tenths = (max(0, ms) + 99) / 100
        return tenths % 10 == 0 ? "\(tenths / 10) s" : "\(tenths / 10).\(tenths % 10) s"
    }
}

/// Where the running relay publishes its health for `georelay status`, a separate process
/// that cannot ask the daemon: `<ingest.socket>.health`, beside the socket.
///
/// The runtime directory (`/run/georelay` under the unit) is a tmpfs, so rewriting the file
/// each check costs no disk. A socket elsewhere (`make run`'s `spool/georelay.sock`) is on
/// the same SD card as the spool, where a 4 KiB block a second would be a quarter of the
/// relay's writes at 4 × 1 Hz (measured, `georelay-bench --only flash`): the file goes to
/// `/dev/shm` then, named after the socket's absolute path so `status` finds the same one.
/// The spool is not used because the writer is one of the parts
/// judged (a stalled writer could not record that it is stalled), and a restart of the
/// relay replaces the file. The file carries the parts' last turns on the monotonic clock,
/// which every process on the machine shares, so `status` judges them against its own now;
/// a file not refreshed within the stall limit means the monitor itself is not running.
package struct HealthFile: Sendable {
    package let path: String

    package init(socketPath: String) {
        let beside = socketPath + ".health"
        let directory = Paths.directory(of: socketPath)
        guard !Self.isInMemory(directory.isEmpty ? "." : directory), Self.isInMemory(Self.memoryDirectory) else {
            path = beside
            return
        }
        let absolute =
            socketPath.hasPrefix("/") ? socketPath : FileManager.default.currentDirectoryPath + "/" + socketPath
        path = Self.memoryDirectory + "/georelay-" + Self.fnv1a(Paths.standardized(absolute)) + ".health"
    }

    static let memoryDirectory = "/dev/shm"

    /// A tmpfs or ramfs: writes cost no storage.
    static func isInMemory(_ directory: String) -> Bool {
        var info = statfs()
        guard statfs(directory, &info) == 0 else { return false }
        return info.f_type == 0x0102_1994 || info.f_type == 0x8584_58f6
    }

    private static func fnv1a(_ text: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return String(hash, radix: 16)
    }

    /// What the file says, plus who wrote it.
    package struct Contents: Sendable, Equatable {
        package var pid: Int32
        package var report: HealthReport
    }

    /// Replaces the file (written beside it, then renamed: a reader never sees half of it).
    package func write(_ report: HealthReport, pid: Int32 = getpid()) throws {
        let parts: [JSONValue] = report.parts.map { part in
            .object(
                JSONObject([
                    ("key", .string(part.key)), ("name", .string(part.name)),
                    ("lastTurnMs", .number(Double(part.lastTurnMs))),
                ]))
        }
        let jump: JSONValue =
            report.clockJump.map {
                .object(JSONObject([("byMs", .number(Double($0.byMs))), ("atMs", .number(Double($0.atMs)))]))
            } ?? .null
        let object = JSONValue.object(
            JSONObject([
                ("pid", .number(Double(pid))),
                ("atMs", .number(Double(report.atMs))),
                ("stallAfterMs", .number(Double(report.stallAfterMs))),
                ("parts", .array(parts)),
                ("clockJump", jump),
            ]))
        try Data((object.jsonText + "\n").utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// The file's contents, or nil when there is none or it is not one of ours.
    ///
    /// Every number is checked before it is converted: the file may sit in `/dev/shm`, where
    /// anyone can plant one, and `Int64(1e400)` or a time near 2⁶³ (whose age then overflows)
    /// would crash `georelay status` instead of being "not one of ours".
    package func read() -> Contents? {
        /// Milliseconds within ±31,700 years: any age or sum of two of them fits in an Int64.
        func ms(_ value: JSONValue?) -> Int64? {
            guard case .number(let n)? = value, abs(n) <= 1e15 else { return nil }
            return CheckedNumbers.int64(n)
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
            case .object(let object)? = try? JSONParser.parse(text),
            case .number(let pidNumber)? = object["pid"], let pid = CheckedNumbers.int32(pidNumber),
            let at = ms(object["atMs"]),
            let stallAfter = ms(object["stallAfterMs"]), case .array(let list)? = object["parts"]
        else { return nil }
        var parts: [HealthReport.Part] = []
        for item in list {
            guard case .object(let part) = item, case .string(let key)? = part["key"],
                case .string(let name)? = part["name"],
                let last = ms(part["lastTurnMs"])
            else { return nil }
            parts.append(HealthReport.Part(key: key, name: name, lastTurnMs: last))
        }
        var jump: ClockJump?
        if case .object(let step)? = object["clockJump"], let by = ms(step["byMs"]), let when = ms(step["atMs"]) {
            jump = ClockJump(byMs: by, atMs: when)
        }
        return Contents(
            pid: pid, report: HealthReport(parts: parts, stallAfterMs: stallAfter, atMs: at, clockJump: jump))
    }

    package func remove() {
        unlink(path)
    }
}

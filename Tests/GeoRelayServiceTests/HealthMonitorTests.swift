import GeoRelayCore
import GeoRelayService
import GeoRelayTestTraits
import Synchronization
import Testing

@Suite(.offThePool) struct HealthMonitorTests {
    @Test func timingsFollowWatchdogSec() {
        let short = HealthMonitor.Configuration(watchdogTimeout: .seconds(2))
        #expect(short.stallAfter == .seconds(2))
        #expect(short.keepAliveInterval == .seconds(1))
        #expect(short.turnInterval == .milliseconds(500))
        #expect(short.checkInterval == .milliseconds(500))
        // The unit's WatchdogSec=60: the loops still turn every second.
        let unit = HealthMonitor.Configuration(watchdogTimeout: .seconds(60))
        #expect(unit.stallAfter == .seconds(60))
        #expect(unit.keepAliveInterval == .seconds(30))
        #expect(unit.turnInterval == .seconds(1))
        #expect(unit.checkInterval == .seconds(1))
        let none = HealthMonitor.Configuration(watchdogTimeout: nil)
        #expect(none.keepAliveInterval == nil)
        #expect(none.stallAfter == .seconds(30))
        #expect(none.turnInterval == .seconds(1))
    }

    @Test(arguments: [
        (Int64(0), "0 s"), (66, "0.1 s"), (500, "0.5 s"), (2000, "2 s"), (2001, "2.1 s"), (9950, "10 s"),
        (17_100, "18 s"), (60_000, "60 s"),
    ])
    func agesRoundUpSoAStallNeverReadsAsItsLimit(_ ms: Int64, _ text: String) {
        #expect(HealthReport.seconds(ms) == text)
    }

    @Test func reportsEachPartsHeartbeat() {
        let clock = SimulatedClock(wallMs: 1_784_953_800_000)
        let ingest = Heartbeat("ingest loop", clock: clock)
        let writer = Heartbeat("spool writer", clock: clock)
        var configuration = HealthMonitor.Configuration()
        configuration.stallAfter = .seconds(2)
        let monitor = HealthMonitor(
            parts: [
                HealthMonitor.Part(key: "ingest", heartbeat: ingest),
                HealthMonitor.Part(key: "writer", heartbeat: writer),
            ],
            configuration: configuration, clock: clock)
        clock.advance(by: .milliseconds(1900))
        ingest.beat()
        clock.advance(by: .milliseconds(100))
        let at2000 = monitor.report()
        #expect(at2000.isHealthy)
        #expect(at2000.problem == nil)
        clock.advance(by: .milliseconds(100))
        let at2100 = monitor.report()
        #expect(!at2100.isHealthy)
        #expect(at2100.stalled.map(\.key) == ["writer"])
        #expect(at2100.problem == "spool writer stalled: no turn for 2.1 s (limit 2 s)")
        clock.advance(by: .milliseconds(16_900))
        #expect(
            monitor.report().problem
                == "ingest loop stalled: no turn for 18 s (limit 2 s); spool writer stalled: no turn for 19 s (limit 2 s)"
        )
    }

    /// A step of the monitor's wall clock (NTP at a cold start, `date -s`) is seen at the next
    /// report, and ages no heartbeat: they beat on the monotonic time.
    @Test func aStepOfTheWallClockIsReportedAndAgesNoPart() {
        let clock = SimulatedClock(wallMs: 1_784_953_800_000)
        let ingest = Heartbeat("ingest loop", clock: clock)
        let monitor = HealthMonitor(
            parts: [HealthMonitor.Part(key: "ingest", heartbeat: ingest)], configuration: .init(), clock: clock)
        #expect(monitor.report().clockJump == nil)
        clock.stepWall(byMs: -3_600_000)
        let after = monitor.report()
        #expect(after.clockJump == ClockJump(byMs: -3_600_000, atMs: 1_784_950_200_000))
        #expect(after.isHealthy)
        #expect(after.ageMs(after.parts[0]) == 0)
    }

    /// The watchdog checks at its monitor's pace: on a simulated clock it sees a part stall and
    /// turn over again only as the clock is moved, and logs both in that clock's time.
    @Test func theWatchdogFollowsTheMonitorsClock() async throws {
        let clock = SimulatedClock(wallMs: 1_784_953_800_000)
        let writer = Heartbeat("spool writer", clock: clock)
        var configuration = HealthMonitor.Configuration()
        configuration.stallAfter = .seconds(2)
        configuration.checkInterval = .seconds(1)
        let monitor = HealthMonitor(
            parts: [HealthMonitor.Part(key: "writer", heartbeat: writer)], configuration: configuration, clock: clock)
        let log = TimedLog()
        let watchdog = Watchdog(
            monitor: monitor, systemd: SystemdNotifier(environment: [:]), file: nil,
            logger: Logger(label: "watchdog", sinks: [log], clock: clock), readyStatus: "relaying")
        let running = Task { await watchdog.run() }
        defer { running.cancel() }

        try await pollUntil("the watchdog's first check to end in a sleep") { clock.sleeping == 1 }
        #expect(log.entries.isEmpty)
        clock.advance(by: .seconds(3))
        try await pollUntil("the check after the writer's stall") { !log.entries.isEmpty }
        let stalled = try #require(log.entries.first)
        #expect(stalled.message.hasPrefix("watchdog: spool writer stalled: no turn for 3 s (limit 2 s)"))
        #expect(stalled.timeMs == 1_784_953_803_000, "logged in the simulated clock's time")

        try await pollUntil("the watchdog asleep again") { clock.sleeping == 1 }
        writer.beat()
        clock.advance(by: .seconds(1))
        try await pollUntil("the check after the writer turned over") { log.entries.count == 2 }
        #expect(log.entries[1].message == "watchdog: spool writer turning over again after 3 s without a turn")
        #expect(log.entries[1].timeMs == 1_784_953_804_000)
    }
}

/// Log entries with their times, as the logger stamped them.
private final class TimedLog: LogSink, Sendable {
    private let recorded = Mutex<[LogEntry]>([])
    func record(_ entry: LogEntry) { recorded.withLock { $0.append(entry) } }
    var entries: [LogEntry] { recorded.withLock { $0 } }
}

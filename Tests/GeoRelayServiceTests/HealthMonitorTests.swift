import GeoRelayCore
import GeoRelayService
import GeoRelayTestTraits
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
        let ingest = Heartbeat("ingest loop", nowMs: 1000)
        let writer = Heartbeat("spool writer", nowMs: 1000)
        var configuration = HealthMonitor.Configuration()
        configuration.stallAfter = .seconds(2)
        let monitor = HealthMonitor(
            parts: [
                HealthMonitor.Part(key: "ingest", heartbeat: ingest),
                HealthMonitor.Part(key: "writer", heartbeat: writer),
            ],
            configuration: configuration)
        ingest.beat(nowMs: 2900)
        let at3000 = monitor.report(nowMs: 3000)
        #expect(at3000.isHealthy)
        #expect(at3000.problem == nil)
        let at3100 = monitor.report(nowMs: 3100)
        #expect(!at3100.isHealthy)
        #expect(at3100.stalled.map(\.key) == ["writer"])
        #expect(at3100.problem == "spool writer stalled: no turn for 2.1 s (limit 2 s)")
        #expect(
            monitor.report(nowMs: 20_000).problem
                == "ingest loop stalled: no turn for 18 s (limit 2 s); spool writer stalled: no turn for 19 s (limit 2 s)"
        )
    }
}

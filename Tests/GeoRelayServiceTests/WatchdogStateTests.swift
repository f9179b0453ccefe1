import GeoRelayCore
import GeoRelayService
import GeoRelayTestTraits
import Testing

/// A report at `atMs` with the ingest loop and the spool writer last turning at the given times.
func report(at atMs: Int64, ingest: Int64? = nil, writer: Int64? = nil, stallAfterMs: Int64 = 2000) -> HealthReport {
    HealthReport(
        parts: [
            HealthReport.Part(key: "ingest", name: "ingest loop", lastTurnMs: ingest ?? atMs),
            HealthReport.Part(key: "writer", name: "spool writer", lastTurnMs: writer ?? atMs),
        ],
        stallAfterMs: stallAfterMs, atMs: atMs)
}

@Suite(.offThePool) struct WatchdogStateTests {
    /// WatchdogSec 2 s: checks every 0.5 s, keep-alives every second.
    func underWatchdog() -> WatchdogState {
        WatchdogState(keepAliveInterval: .seconds(1), checkInterval: .milliseconds(500))
    }

    func keepAlives(_ actions: [WatchdogState.Action]) -> Int { actions.filter { $0 == .notify("WATCHDOG=1") }.count }

    @Test func keepAlivesGoEveryIntervalWhileBothPartsTurn() {
        var state = underWatchdog()
        // Checks a little late each time, as sleeps are.
        let sent = stride(from: Int64(0), through: 4040, by: 505).map { at in
            (at, keepAlives(state.next(report(at: at), readyStatus: "relaying")))
        }
        #expect(sent.filter { $0.1 == 1 }.map(\.0) == [0, 1010, 2020, 3030, 4040])
        #expect(sent.allSatisfy { $0.1 <= 1 })
    }

    @Test func aStalledPartWithholdsKeepAlivesAndIsReportedOncePerEpisode() {
        var state = underWatchdog()
        #expect(state.next(report(at: 0), readyStatus: "relaying to traccar") == [.notify("WATCHDOG=1")])
        // The ingest loop last turned at 1000; alive up to 2 s later, stalled after.
        #expect(
            state.next(report(at: 3000, ingest: 1000), readyStatus: "relaying to traccar") == [.notify("WATCHDOG=1")])
        let stalled = state.next(report(at: 3500, ingest: 1000), readyStatus: "relaying to traccar")
        #expect(
            stalled == [
                .log(
                    .error,
                    "ingest loop stalled: no turn for 2.5 s (limit 2 s); withholding the watchdog keep-alive, so systemd restarts the relay unless it turns over again"
                ),
                .notify("STATUS=ingest loop stalled (no turn for 2.5 s); watchdog keep-alive withheld"),
            ])
        // Still stalled: nothing more, above all no keep-alive.
        for at in stride(from: Int64(4000), through: 9000, by: 500) {
            #expect(state.next(report(at: at, ingest: 1000), readyStatus: "relaying to traccar") == [])
        }
        // It turns again: said once, STATUS back to normal, and the keep-alive at once.
        #expect(
            state.next(report(at: 9500, ingest: 9400), readyStatus: "relaying to traccar") == [
                .log(.notice, "ingest loop turning over again after 8.4 s without a turn"),
                .notify("STATUS=relaying to traccar"),
                .notify("WATCHDOG=1"),
            ])
        // A second episode is a new report.
        _ = state.next(report(at: 10_000), readyStatus: "relaying to traccar")
        let again = state.next(report(at: 13_000, ingest: 10_000), readyStatus: "relaying to traccar")
        #expect(
            again.contains {
                if case .log(.error, let message) = $0 { message.hasPrefix("ingest loop stalled") } else { false }
            })
    }

    @Test func eachPartIsJudgedOnItsOwn() {
        var state = underWatchdog()
        _ = state.next(report(at: 0), readyStatus: "ok")
        let writer = state.next(report(at: 3000, writer: 500), readyStatus: "ok")
        #expect(
            writer.contains(.notify("STATUS=spool writer stalled (no turn for 2.5 s); watchdog keep-alive withheld")))
        #expect(keepAlives(writer) == 0)
        // The ingest loop stalls too: the STATUS names both.
        let both = state.next(report(at: 3500, ingest: 1000, writer: 500), readyStatus: "ok")
        #expect(both.filter { if case .log(.error, _) = $0 { true } else { false } }.count == 1)
        #expect(
            both.contains(
                .notify(
                    "STATUS=ingest loop stalled (no turn for 2.5 s), spool writer stalled (no turn for 3 s); watchdog keep-alive withheld"
                )))
        // The writer recovers, the loop does not: still no keep-alive, and the STATUS says what is left.
        let one = state.next(report(at: 4000, ingest: 1000), readyStatus: "ok")
        #expect(one.contains(.notify("STATUS=ingest loop stalled (no turn for 3 s); watchdog keep-alive withheld")))
        #expect(keepAlives(one) == 0)
        #expect(keepAlives(state.next(report(at: 4500), readyStatus: "ok")) == 1)
    }

    @Test func withoutAWatchdogNothingIsKeptAliveButStallsAreStillReported() {
        var state = WatchdogState(keepAliveInterval: nil, checkInterval: .seconds(1))
        #expect(state.next(report(at: 0, stallAfterMs: 30_000), readyStatus: "ok") == [])
        #expect(
            state.next(report(at: 40_000, writer: 0, stallAfterMs: 30_000), readyStatus: "ok") == [
                .log(
                    .error,
                    "spool writer stalled: no turn for 40 s (limit 30 s); /healthz answers 503 until it turns over again"
                ),
                .notify("STATUS=spool writer stalled (no turn for 40 s)"),
            ])
    }
}

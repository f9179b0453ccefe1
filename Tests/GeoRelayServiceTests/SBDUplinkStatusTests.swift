import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward
@testable import GeoRelayService
@testable import GeoRelaySpool

/// The modem aboard where the crew looks: its sky, its last session in words, and the credits
/// against the caps, on the status screen, in its JSON and in the metrics.
@Suite(.offThePool) struct SBDUplinkStatusTests {
    static let nowMs: Int64 = 1_784_953_860_000

    func configuration() throws -> Configuration {
        try Configuration.parse(
            #"{ sbd: { device: "/dev/ttyUSB0", units: ["boat"], dailyCredits: 40, monthlyCredits: 600 } }"#)
    }

    func status(_ counters: [String: Int64]) -> SpoolStatus {
        SpoolStatus(
            destinations: [], devices: [], rows: 0, fileBytes: 0, usedBytes: 0, counters: counters, integrity: [:])
    }

    func report(_ counters: [String: Int64]) throws -> StatusReport {
        StatusReport(status: status(counters), configuration: try configuration(), running: true, nowMs: Self.nowMs)
    }

    @Test func aSentSessionAndTheCreditsOfTheDayAndMonth() throws {
        let windows = SBDPlanner.creditWindows(wallMs: Self.nowMs)
        let yesterday = SBDPlanner.creditWindows(wallMs: Self.nowMs - 86_400_000).day
        let counters: [String: Int64] = [
            "sbd.messages": 7, "sbd.credits": 9, "sbd.positions": 11, "sbd.failures": 2, windows.day: 3,
            windows.month: 9, yesterday: 6, "sbd.signal": 4, "sbd.service": 1,
            "sbd.lastSessionMs": 1_784_953_800_000, "sbd.lastMOStatus": 0, "sbd.alarmsWaiting": 1,
        ]
        let report = try report(counters)
        #expect(
            report.text.contains(
                "iridium modem /dev/ttyUSB0; signal 4 of 5, in service; last session 2026-07-25T04:30:00.000Z: sent; credits today 3 of 40, this month 9 of 600; 7 messages, 11 positions, 2 failed sessions; 1 alarms waiting"
            ), "\(report.text)")
        let sbd = report.json["sbd"]
        #expect(sbd?["creditsToday"]?.number == 3 && sbd?["dailyCredits"]?.number == 40)
        #expect(sbd?["creditsThisMonth"]?.number == 9 && sbd?["monthlyCredits"]?.number == 600)
        #expect(sbd?["signal"]?.number == 4 && sbd?["service"]?.bool == true)
        #expect(sbd?["lastSession"]?["result"]?.string == "sent" && sbd?["lastSession"]?["moStatus"]?.number == 0)

        let metrics = Metrics.render(status(counters), configuration: try configuration(), nowMs: Self.nowMs)
        for sample in [
            #"georelay_sbd_signal_bars{device="/dev/ttyUSB0"} 4"#, #"georelay_sbd_service{device="/dev/ttyUSB0"} 1"#,
            #"georelay_sbd_credits_today{device="/dev/ttyUSB0"} 3"#,
            #"georelay_sbd_credits_daily_cap{device="/dev/ttyUSB0"} 40"#,
            #"georelay_sbd_messages_total{device="/dev/ttyUSB0"} 7"#,
            #"georelay_sbd_last_session_timestamp_seconds{device="/dev/ttyUSB0"} 1784953800"#,
        ] {
            #expect(metrics.contains(sample), "\(sample) in \(metrics)")
        }
    }

    /// A failed session says why and what comes next; a fatal one says the modem cannot send;
    /// a modem never heard from says so, and shows no signal rather than a zero.
    @Test(arguments: [
        (Int64(32), "last session 2026-07-25T04:30:00.000Z: failed, no network service (32); trying again"),
        (15, "cannot send: access is denied: no SBD subscription for this modem (15)"),
        (-1, "no answer from the modem"),
    ])
    func aSessionThatDidNotSendSaysWhy(moStatus: Int64, words: String) throws {
        let report = try report(["sbd.lastSessionMs": 1_784_953_800_000, "sbd.lastMOStatus": moStatus])
        #expect(report.text.contains(words), "\(report.text)")
        #expect(report.text.contains("not heard from yet"))
        #expect(report.json["sbd"]?["signal"] == .null)
        let metrics = Metrics.render(status([:]), configuration: try configuration(), nowMs: Self.nowMs)
        #expect(!metrics.contains("georelay_sbd_signal_bars{"), "no sample for a signal never reported")
    }
}

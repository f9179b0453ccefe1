import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayService
@testable import GeoRelaySpool

/// A vessel's integrity where the crew looks: the status screen, its JSON and the metrics.
@Suite(.offThePool) struct IntegrityStatusTests {
    static let devices = #"devices: [{ id: "boat", sources: ["gps1", "gps2"] }, { id: "tender", sources: ["gps3"] }]"#

    func configuration(watch: Bool = true) throws -> Configuration {
        try Configuration.parse("{ \(Self.devices), integrity: { enabled: \(watch) } }")
    }

    func status(_ integrity: [String: IntegrityRecord]) -> SpoolStatus {
        SpoolStatus(
            destinations: [],
            devices: ["boat", "gps1", "gps2", "tender", "gps3"].map {
                SpoolStatus.Device(name: $0, lastFixMs: 1_000, lastReceivedMs: 1_000, received: 1)
            }, rows: 5, fileBytes: 0, usedBytes: 0, counters: [:], integrity: integrity)
    }

    @Test func aSpoofedVesselIsSaidInPlainWordsAndCounted() throws {
        let record = IntegrityRecord(
            device: "boat", state: "spoofed", sinceMs: 1_784_953_800_000, evidence: "gps1: a jump of 12 km in 1 s",
            episodes: 2)
        let configuration = try configuration()
        let report = StatusReport(
            status: status(["boat": record]), configuration: configuration, running: true, nowMs: 1_784_953_860_000)
        #expect(
            report.text.contains(
                "integrity spoofed since 2026-07-25T04:30:00.000Z (gps1: a jump of 12 km in 1 s); 2 episodes of jamming or spoofing"
            ), "\(report.text)")
        let boat = report.json["devices"]?.array?.first { $0["name"]?.string == "boat" }
        #expect(boat?["integrity"]?["state"]?.string == "spoofed")
        #expect(boat?["integrity"]?["episodes"]?.number == 2)
        let tender = report.json["devices"]?.array?.first { $0["name"]?.string == "tender" }
        #expect(tender?["integrity"]?["state"]?.string == "ok", "a vessel with no record is ok")

        let metrics = Metrics.render(status(["boat": record]), configuration: configuration, nowMs: 1_784_953_860_000)
        #expect(metrics.contains(#"georelay_integrity_state{device="boat",state="spoofed"} 1"#), "\(metrics)")
        #expect(metrics.contains(#"georelay_integrity_state{device="boat",state="ok"} 0"#))
        #expect(metrics.contains(#"georelay_integrity_episodes_total{device="boat"} 2"#))
        #expect(metrics.contains(#"georelay_integrity_state{device="tender",state="ok"} 1"#))

        // With the watch off, nothing is said of it.
        let unwatched = StatusReport(
            status: status([:]), configuration: try self.configuration(watch: false), running: true, nowMs: 0)
        #expect(unwatched.json["devices"]?.array?.allSatisfy { $0["integrity"] == nil } == true)
        #expect(!unwatched.text.contains("integrity"))
        #expect(
            !Metrics.render(status([:]), configuration: try self.configuration(watch: false), nowMs: 0).contains(
                "georelay_integrity_state{"))
    }

    @Test func aVesselWhoseWatchNeverLeftOkIsOk() throws {
        let configuration = try configuration()
        let report = StatusReport(status: status([:]), configuration: configuration, running: true, nowMs: 0)
        let boat = report.json["devices"]?.array?.first { $0["name"]?.string == "boat" }
        #expect(boat?["integrity"]?["state"]?.string == "ok")
        #expect(boat?["integrity"]?["episodes"]?.number == 0)
        #expect(report.text.contains("boat: last fix") && report.text.contains("integrity ok"), "\(report.text)")
        let metrics = Metrics.render(status([:]), configuration: configuration, nowMs: 0)
        #expect(metrics.contains(#"georelay_integrity_state{device="boat",state="ok"} 1"#))
    }
}

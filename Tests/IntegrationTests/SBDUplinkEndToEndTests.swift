import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// The modem aboard through the real binary: with IP down, an alarm and the units' newest go
/// by a fake 9603 on a pseudo-terminal, in a message the shore relay files under the same devices.
@Suite(.offThePool) struct SBDUplinkEndToEndTests {
    @Test func anAlarmGoesByTheModemWhileIPIsDownAndTheShoreReadsIt() async throws {
        let modem = try FakeIridiumModem()
        defer { modem.stop() }
        modem.setMOBuffer([0xDE, 0xAD]) // left by a relay that died before clearing it
        let world = try RelayWorld()
        world.server.http.stop() // IP delivers nothing
        try world.writeConfig(
            topLevel: #"""
                sbd: { device: "\#(modem.devicePath)", units: ["boat", "mob"], relayId: 9,
                       fallbackSeconds: 1, alarmGraceSeconds: 0 },
                """#)
        try world.start()
        let client = try world.client()
        try client.write(line("boat", 0))
        _ = client.readLine()
        try client.write(#"{"device":"mob","time":1784953801,"lat":59.0001,"lon":10.0002,"alarm":"sos"}"# + "\n")
        _ = client.readLine()

        let delivered = await modem.waitForDelivered(1)
        let logs = { (try? world.command(["logs"]).stdout) ?? "" }
        #expect(delivered, "no message reached the gateway within 30 s\n\(logs().suffix(3000))")
        guard let payload = modem.delivered.first else { return }
        #expect(payload != [0xDE, 0xAD], "the message a dead relay left was cleared, not sent")
        #expect(payload.count <= SBDMessage.creditBytes, "\(payload.count) bytes: one credit")
        // The shore relay's reading of it, with the same unit list.
        let shore = try SBDShore.delivery(
            imei: "300434063904790", payload: payload,
            vessels: [SBDShore.Vessel(imei: "300434063904790", units: ["boat", "mob"], relayID: 9)])
        let byDevice = Dictionary(grouping: shore.positions, by: \.device)
        #expect(byDevice["mob"]?.contains { $0.alarm == "sos" && $0.timeMs == 1_784_953_801_000 } == true)
        #expect(byDevice["boat"]?.contains { $0.timeMs == 1_784_953_800_000 } == true, "the units' newest with it")
        #expect(modem.moBuffer == nil, "cleared after the session")
        let status = try await world.waitForStatus { ($0["sbd"]?["messages"]?.number ?? 0) >= 1 }
        #expect(status["sbd"]?["credits"]?.number == 1)
        #expect(logs().contains("sbd: message 1 sent"))
        // Once carried, the alarm does not go again; nothing new to carry until the interval.
        try await Task.sleep(for: .seconds(2)) // a few of the uplink's looks, measured, not awaited
        #expect(modem.delivered.count == 1)
    }
}

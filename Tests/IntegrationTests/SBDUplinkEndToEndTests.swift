import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// The modem aboard through the real binary: with IP down, the units' newest and then an alarm go
/// by a fake 9603 on a pseudo-terminal, in messages the shore relay files under the same devices.
@Suite(.offThePool) struct SBDUplinkEndToEndTests {
    @Test func positionsAndAnAlarmGoByTheModemWhileIPIsDownAndTheShoreReadsThem() async throws {
        let modem = try FakeIridiumModem()
        defer { modem.stop() }
        modem.setMOBuffer([0xDE, 0xAD]) // left by a relay that died before clearing it
        let world = try RelayWorld()
        let serverPort = world.server.http.port
        world.server.http.stop() // IP delivers nothing
        try world.writeConfig(
            topLevel: #"""
                sbd: { device: "\#(modem.devicePath)", units: ["boat", "mob"], relayId: 9,
                       fallbackSeconds: 1, alarmGraceSeconds: 0 },
                """#)
        try world.start()
        let client = try world.client()
        let logs = { (try? world.command(["logs"]).stdout) ?? "" }
        // IP silent past the fallback: the units' newest go at the interval, the first at once.
        try client.write(line("boat", 0))
        _ = client.readLine()
        let routine = await modem.waitForDelivered(1)
        #expect(routine, "no routine message within 30 s\n\(logs().suffix(3000))")
        // An alarm goes at once, not at the interval a quarter of an hour away.
        try client.write(#"{"device":"mob","time":1784953801,"lat":59.0001,"lon":10.0002,"alarm":"sos"}"# + "\n")
        _ = client.readLine()
        let answered = ContinuousClock.now
        let alarm = await modem.waitForDelivered(2)
        print("sbd: the alarm at the gateway \(ContinuousClock.now - answered) after its ok (the fake modem's session)")
        #expect(alarm, "the alarm did not reach the gateway within 30 s\n\(logs().suffix(3000))")
        let delivered = modem.delivered
        guard delivered.count >= 2 else { return }
        #expect(!delivered.contains([0xDE, 0xAD]), "the message a dead relay left was cleared, not sent")
        #expect(delivered.allSatisfy { $0.count <= SBDMessage.creditBytes }, "one credit each")
        // The shore relay's reading of them, with the same unit list.
        let vessels = [SBDShore.Vessel(imei: "300434063904790", units: ["boat", "mob"], relayID: 9)]
        let first = try SBDShore.delivery(imei: "300434063904790", payload: delivered[0], vessels: vessels)
        let second = try SBDShore.delivery(imei: "300434063904790", payload: delivered[1], vessels: vessels)
        #expect(first.positions.map(\.device) == ["boat"] && first.positions[0].timeMs == 1_784_953_800_000)
        #expect(second.positions.map(\.device) == ["mob"] && second.positions[0].alarm == "sos")
        #expect(second.sequence == first.sequence + 1)
        let status = try await world.waitForStatus { ($0["sbd"]?["messages"]?.number ?? 0) >= 2 }
        // Counted once its session is over, the buffer cleared with it.
        #expect(modem.moBuffer == nil, "cleared after the session")
        #expect(status["sbd"]?["credits"]?.number == 2)
        // What the crew sees of the modem: the sky it reported at set-up, and the last session.
        #expect(
            status["sbd"]?["signal"]?.number == 4 && status["sbd"]?["service"]?.bool == true,
            "\(status["sbd"] ?? .null)")
        #expect(status["sbd"]?["lastSession"]?["result"]?.string == "sent")
        let screen = try world.command(["status"]).stdout
        #expect(
            screen.contains("iridium modem \(modem.devicePath); signal 4 of 5, in service; last session "), "\(screen)")
        #expect(logs().contains("sbd: message 2 sent"))
        // Once carried, the alarm does not go again; nothing new to carry until the interval.
        try await Task.sleep(for: .seconds(6)) // more than one of the uplink's looks, measured, not awaited
        #expect(modem.delivered.count == 2)

        // IP back: what SBD carried (the shore delivered it) is not sent again; what came since is.
        try client.write(line("boat", 5))
        _ = client.readLine()
        try world.server.http.start(port: serverPort)
        #expect(
            await world.server.waitUntil { $0.contains { $0.fixTimeMs == fixTimeMs(5) } },
            "the position stored after the messages did not arrive over IP\n\(logs().suffix(3000))")
        _ = try await world.waitForStatus { ($0.destinationStatus("traccar")?["pending"]?.number ?? 1) == 0 }
        let overIP = world.server.positions.map { "\($0.uniqueId) \($0.fixTimeMs)" }
        #expect(overIP == ["boat \(fixTimeMs(5))"], "SBD's positions went over IP too: \(overIP)")
    }
}

extension JSONObject {
    fileprivate func destinationStatus(_ name: String) -> JSONValue? {
        self["destinations"]?.array?.first { $0["name"]?.string == name }
    }
}

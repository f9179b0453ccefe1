import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// The integrity watch in the real relay (issue 49): two receivers' NMEA collectors on the
/// socket, one meaconed 3.2 km away (`gnss_voyage.py --attack jump`), and what Traccar gets.
@Suite(.offThePool) struct IntegrityEndToEndTests {
    @Test func aMeaconedReceiverIsPassedOverFlaggedAndAlarmedOnceAtTraccar() async throws {
        let voyage = try GNSSVoyage(["--attack", "jump", "--seconds", "50", "--at", "30"])
        let world = try RelayWorld()
        try world.writeConfig(
            topLevel: #"devices: [{ id: "boat", sources: ["gps1", "gps2"] }], integrity: { enterSeconds: 0 },"#)
        try world.start()
        var clients: [String: UnixLineClient] = [:]
        for receiver in ["gps1", "gps2"] {
            let client = try UnixLineClient(path: world.socketPath)
            try client.write(#"{"hello":{"device":"\#(receiver)","ack":true}}"# + "\n")
            _ = client.readLine()
            clients[receiver] = client
        }
        // Both receivers' lines of a second together, a second every 10 ms: the relay hears them
        // interleaved, roughly as at sea (a late receiver only shifts which one's fix of a second
        // comes first). The watch judges by the receivers' own times, and with `enterSeconds: 0`
        // its state does not wait on the relay's clock. Every line answered, none refused.
        let attackMs = try #require(voyage.evidenceMs)
        var written: [String: Int] = [:]
        for second in Dictionary(grouping: voyage.lines, by: { $0.atMs / 1000 }).sorted(by: { $0.key < $1.key }) {
            for (receiver, lines) in Dictionary(grouping: second.value, by: \.receiver) {
                try clients[receiver]!.write(lines.map { $0.sentence + "\r\n" }.joined())
                written[receiver, default: 0] += lines.count
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        for (receiver, count) in written {
            let replies = clients[receiver]!.readLines(count)
            #expect(replies.count == count && !replies.contains { $0.hasPrefix("err") }, "\(receiver): \(replies)")
        }
        #expect(
            await world.server.waitUntil { $0.filter { $0.uniqueId == "boat" }.count >= 49 },
            "the boat's positions at Traccar")
        let boat = world.server.positions.filter { $0.uniqueId == "boat" }.sorted { $0.fixTimeMs < $1.fixTimeMs }
        let start = 1_784_953_800_000 + attackMs
        // One a second; the second of the failover may have none (the other receiver's fix of it
        // came first, while the meaconed one was still the vessel's).
        #expect(boat.count >= 49, "one boat position a second")
        #expect(
            boat.filter { $0.fixTimeMs >= start }.allSatisfy { $0.attributes["source"] == .string("gps2") },
            "the meaconed receiver passed over from its first false fix")
        #expect(boat.filter { $0.fixTimeMs < start }.allSatisfy { $0.attributes["integrity"] == nil })
        #expect(boat.last?.attributes["integrity"] == .string("spoofed"))
        #expect(boat.compactMap { $0.attributes["alarm"] } == [.string("tampering")], "one alarm an episode")
        #expect(world.server.positions.filter { $0.uniqueId == "gps1" }.count == 0, "sources are not forwarded")

        // What the crew reads: the vessel's state, since when, why, and the episode counted
        // (held state: there within the state interval).
        func integrity(_ status: JSONObject) -> JSONValue? {
            status["devices"]?.array?.first { $0["name"]?.string == "boat" }?["integrity"]
        }
        let status = try await world.waitForStatus(timeout: .seconds(40)) {
            integrity($0)?["state"]?.string == "spoofed"
        }
        #expect(integrity(status)?["state"]?.string == "spoofed", "\(String(describing: integrity(status)))")
        #expect(integrity(status)?["episodes"]?.number == 1)
        #expect(integrity(status)?["evidence"]?.string?.contains("gps1") == true, "the evidence names the receiver")
        #expect(integrity(status)?["since"]?.string != nil)
        let text = try world.command(["status"]).stdout
        #expect(text.contains("integrity spoofed since"), "\(text)")
    }
}

import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// The shore relay's Iridium DirectIP door through the real binary: the gateway's connection,
/// one message, the confirmation, and the vessel's positions on to Traccar under the ids the
/// relay aboard uses.
@Suite(.offThePool) struct SBDShoreEndToEndTests {
    static let imei = "300434063904790"
    static let units = ["gps-bow", "gps-stern", "ais", "mob"]

    /// As Iridium's gateway delivers: connect, write, half-close, read the confirmation.
    static func deliver(_ bytes: [UInt8], port: Int) throws -> [UInt8] {
        guard let socket = IPv4Socket.connect(host: "127.0.0.1", port: port) else {
            throw RelayProcessError(message: "the DirectIP door at \(port) refused the gateway")
        }
        defer { try? socket.close() }
        try socket.writeAll(bytes, context: "DirectIP")
        _ = shutdown(socket.number, Int32(SHUT_WR))
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64)
        while answer.count < 7 {
            var descriptor = pollfd(fd: socket.number, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 10_000) > 0 else {
                throw RelayProcessError(message: "no DirectIP confirmation within 10 s")
            }
            let read = buffer.withUnsafeMutableBytes { try? socket.read(into: $0) }
            guard case .processed(let count)? = read, count > 0 else { break }
            answer += buffer[..<count]
        }
        return answer
    }

    static func message(imei: String = imei, payload: [UInt8]?) -> [UInt8] {
        DirectIPMessage(
            cdrReference: 77, imei: imei, sessionStatus: 0, momsn: 12, mtmsn: 0, sessionTimeSeconds: 1_784_953_810,
            payload: payload
        ).encode()
    }

    @Test func aVesselsMessageReachesTraccarOnceAndBadOnesAreRefused() async throws {
        let world = try RelayWorld()
        let port = freePort()
        try world.writeConfig(
            ingest: #"""
                sbd: { directIP: "127.0.0.1:\#(port)", confirm: true,
                       vessels: [{ imei: "\#(Self.imei)", units: ["gps-bow", "gps-stern", "ais", "mob"], relayId: 7 }] }
                """#)
        try world.start()
        try awaitListening(port: port)
        let payload = try SBDMessage(
            relayID: 7, sequence: 3, roster: SBDMessage.rosterCheck(Self.units),
            fixes: [
                .init(unit: 0, timeSeconds: 1_784_953_800, lat: 59.91273, lon: 10.74609, speedKnots: 6, course: 47),
                .init(unit: 3, timeSeconds: 1_784_953_795, lat: 59.91268, lon: 10.74600, alarm: "sos"),
            ]
        ).encode()
        let taken = DirectIPMessage.confirmation(taken: true)
        let refused = DirectIPMessage.confirmation(taken: false)
        #expect(try Self.deliver(Self.message(payload: payload), port: port) == taken)
        // The gateway's retry after a lost confirmation: taken again, stored once.
        #expect(try Self.deliver(Self.message(payload: payload), port: port) == taken)
        // A mailbox check carries nothing, and is taken.
        #expect(try Self.deliver(Self.message(payload: nil), port: port) == taken)
        // Refused, nothing stored: an IMEI no vessel has, a frame cut short, another unit list.
        #expect(try Self.deliver(Self.message(imei: "300434063904791", payload: payload), port: port) == refused)
        #expect(try Self.deliver(Array(Self.message(payload: payload).prefix(20)), port: port) == refused)
        let otherRoster = try SBDMessage(
            relayID: 7, sequence: 4, roster: SBDMessage.rosterCheck(["mob"]),
            fixes: [.init(unit: 0, timeSeconds: 1_784_953_900, lat: 1, lon: 1)]
        ).encode()
        #expect(try Self.deliver(Self.message(payload: otherRoster), port: port) == refused)

        #expect(await world.server.waitUntil { $0.count >= 2 }, "the vessel's two positions at Traccar")
        let status = try await world.waitForStatus { ($0.destination("traccar")?["pending"]?.number ?? 1) == 0 }
        #expect(status.destination("traccar")?["sent"]?.number == 2, "each position stored and sent once")
        let sbd = status["ingest"]?["sbd"]
        #expect(sbd?["messages"]?.number == 3 && sbd?["refused"]?.number == 3, "\(String(describing: sbd))")
        #expect(sbd?["positions"]?.number == 4, "two positions, taken twice")
        let byDevice = Dictionary(uniqueKeysWithValues: world.server.positions.map { ($0.uniqueId, $0) })
        #expect(Set(byDevice.keys) == ["gps-bow", "mob"])
        #expect(byDevice["gps-bow"]?.fixTimeMs == 1_784_953_800_000 && byDevice["gps-bow"]?.course == 47)
        #expect(abs((byDevice["gps-bow"]?.speedKnots ?? 0) - 6) < 0.01)
        #expect(byDevice["mob"]?.attributes["alarm"] == .string("sos"))
        let logs = try world.command(["logs"]).stdout
        #expect(logs.contains("not a vessel in ingest.sbd.vessels"), "\(logs.suffix(2000))")
        #expect(logs.contains("another list"), "\(logs.suffix(2000))")
    }

    @Test func aShoreDoorWithoutVesselsIsRefusedAtStart() throws {
        let world = try RelayWorld()
        try world.writeConfig(ingest: #"sbd: { directIP: "127.0.0.1:\#(freePort())" }"#)
        let check = try world.command(["check"])
        #expect(check.status != 0)
        #expect(check.stderr.contains("ingest.sbd.vessels"), "\(check.stderr)")
    }
}

extension JSONObject {
    fileprivate func destination(_ name: String) -> JSONValue? {
        self["destinations"]?.array?.first { $0["name"]?.string == name }
    }
}

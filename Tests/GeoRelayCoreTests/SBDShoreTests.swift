import GeoRelayCore
import GeoRelayTestTraits
import Testing

/// The shore relay's reading of a vessel's message: its devices' positions under the ids the relay
/// aboard uses, or a refusal that stores nothing.
@Suite(.offThePool) struct SBDShoreTests {
    static let units = ["gps-bow", "gps-stern", "ais", "mob"]
    static let vessel = SBDShore.Vessel(imei: "300434063904790", units: units, relayID: 7)

    static func payload(roster: [String] = units, relayID: UInt32 = 7, unit: Int = 3) throws -> [UInt8] {
        try SBDMessage(
            relayID: relayID, sequence: 41, roster: SBDMessage.rosterCheck(roster),
            fixes: [
                .init(unit: 0, timeSeconds: 1_784_953_800, lat: 59.91273, lon: 10.74609, speedKnots: 6, course: 47),
                .init(unit: unit, timeSeconds: 1_784_953_790, lat: 59.91268, lon: 10.74600, alarm: "sos"),
            ]
        ).encode()
    }

    @Test func aMessageBecomesTheVesselsDevicesPositions() throws {
        let delivery = try SBDShore.delivery(
            imei: Self.vessel.imei, payload: try Self.payload(), vessels: [Self.vessel])
        #expect(delivery.sequence == 41 && delivery.positions.count == 2)
        let bow = delivery.positions[0]
        #expect(bow.device == "gps-bow" && bow.timeMs == 1_784_953_800_000 && bow.course == 47)
        #expect(abs(bow.speed! - 6 * 1852 / 3600) < 1e-9, "6 knots in metres a second")
        #expect(delivery.positions[1].device == "mob" && delivery.positions[1].alarm == "sos")
    }

    @Test func whatCannotBeFiledRightIsRefused() throws {
        func refusal(imei: String = Self.vessel.imei, _ payload: [UInt8]) -> String {
            do {
                _ = try SBDShore.delivery(imei: imei, payload: payload, vessels: [Self.vessel])
                return ""
            } catch {
                return error.message
            }
        }
        #expect(refusal(imei: "300434063904791", try Self.payload()).contains("not a vessel in ingest.sbd.vessels"))
        #expect(refusal(try Self.payload(roster: ["gps-stern", "gps-bow", "ais", "mob"])).contains("another list"))
        #expect(refusal(try Self.payload(relayID: 8)).contains("relay id 8"))
        #expect(refusal(try Self.payload(unit: 4)).contains("unit 4; the vessel has 4"))
        #expect(refusal([2, 0, 0]).contains("format version 2"))
    }
}

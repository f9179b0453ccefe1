import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// Multi-source routing on an injected monotonic clock: no real wait for a window to pass.
@Suite(.offThePool) struct SourceRouterTests {
    static let boat = Configuration.DeviceSources(id: "boat", sources: ["gps-bow", "gps-stern"], failoverSeconds: 1)

    static func fix(_ device: String, lat: Double = 59) -> Position {
        Position(device: device, timeMs: 1_784_953_800_000, lat: lat, lon: 10)
    }

    @Test func theBestReceiverFeedsTheDeviceAndTheBackupTakesOverWhenItFallsSilent() throws {
        let log = CapturedLog()
        let router = SourceRouter(devices: [Self.boat], logger: log.logger)
        // Both report: only the primary's position becomes the boat's, with its source named.
        let routed = try #require(router.route(Self.fix("gps-bow"), nowMs: 0))
        #expect(routed.device == "boat" && routed.attributes == [Attribute("source", .string("gps-bow"))])
        #expect(router.route(Self.fix("gps-stern"), nowMs: 10) == nil)
        #expect(router.route(Self.fix("gps-bow"), nowMs: 1000) != nil)
        // Within the window after the primary's last report the backup is still held back…
        #expect(router.route(Self.fix("gps-stern"), nowMs: 2000) == nil)
        // …and once the primary has been silent for longer, the backup is the boat.
        let takeover = try #require(router.route(Self.fix("gps-stern", lat: 59.1), nowMs: 2001))
        #expect(
            takeover.device == "boat" && takeover.lat == 59.1
                && takeover.attributes == [Attribute("source", .string("gps-stern"))])
        #expect(log.messages == ["test: boat: failover from gps-bow to gps-stern"])
        // The primary back: it wins again at once.
        #expect(router.route(Self.fix("gps-bow"), nowMs: 2500) != nil)
        #expect(router.route(Self.fix("gps-stern"), nowMs: 2600) == nil)
        #expect(log.messages.last == "test: boat: failover from gps-stern to gps-bow")
    }

    @Test func aDeviceNotListedAsASourceIsNotRouted() {
        let router = SourceRouter(devices: [Self.boat], logger: .disabled)
        #expect(router.route(Self.fix("dinghy"), nowMs: 0) == nil)
    }
}

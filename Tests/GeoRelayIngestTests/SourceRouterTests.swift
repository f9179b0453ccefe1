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

    /// A receiver the integrity watch suspects is passed over for one it does not; once the
    /// vessel's state is `spoofed`, its positions say so, and the first carries Traccar's
    /// `tampering` alarm, once.
    @Test func aSpoofedReceiverIsPassedOverAndThePositionsSaySo() throws {
        let log = CapturedLog()
        let boat = Configuration.DeviceSources(id: "boat", sources: ["gps-bow", "gps-stern"], failoverSeconds: 10)
        let router = SourceRouter(devices: [boat], logger: log.logger)
        var copies: [(second: Int64, position: Position)] = []
        for second in Int64(0)..<40 {
            for source in ["gps-bow", "gps-stern"] {
                // Ten knots north; from 20 s the bow's receiver reports a place 5.5 km away.
                let lat = 59 + Double(second) * 4.6e-5 + (source == "gps-bow" && second >= 20 ? 0.05 : 0)
                var fix = Self.fix(source, lat: lat)
                fix.timeMs += second * 1000
                fix.speed = 5.1
                router.observe(
                    GNSSSample(
                        source: source, atMs: second * 1000,
                        fix: .init(timeMs: fix.timeMs, lat: fix.lat, lon: fix.lon, speed: 5.1)))
                if let copy = router.route(fix, nowMs: second * 1000) { copies.append((second, copy)) }
            }
        }
        #expect(copies.count == 40, "one copy a second")
        #expect(
            copies.filter { $0.second < 20 }.allSatisfy { $0.position.attributes.first?.value == .string("gps-bow") })
        #expect(
            copies.filter { $0.second >= 20 }.allSatisfy { $0.position.attributes.first?.value == .string("gps-stern") }
        )
        let flagged = copies.filter { $0.position.attributes.contains(Attribute("integrity", .string("spoofed"))) }
        #expect(flagged.first?.second == 23, "spoofed once the jump has stood 3 s")
        #expect(copies.compactMap(\.position.alarm) == ["tampering"])
        #expect(copies.first { $0.position.alarm != nil }?.second == 23)
        #expect(router.integrity(of: "boat", nowMs: 40_000)?.state == .spoofed)
        #expect(log.messages.contains("test: boat: failover from gps-bow to gps-stern"))
        #expect(
            log.messages.contains {
                $0.hasPrefix("test: boat: integrity ok → spoofed: jump (gps-bow): 5.6 km in 1.0 s")
                    && $0.hasSuffix("(alarm)")
            }, "\(log.messages)")
    }

    /// The spool keeps one position per device and fix time: the alarm goes on the vessel's next
    /// position newer than any routed before, never on a late older one it might refuse.
    @Test func theAlarmGoesOnANewerPositionOnly() {
        var settings = IntegritySettings()
        settings.enterSeconds = 0
        let boat = Configuration.DeviceSources(id: "boat", sources: ["gps-bow"], integrity: settings)
        let router = SourceRouter(devices: [boat], logger: .disabled)
        func at(_ second: Int64, lat: Double) -> Position {
            var fix = Self.fix("gps-bow", lat: lat)
            fix.timeMs += second * 1000
            router.observe(
                GNSSSample(source: "gps-bow", atMs: second * 1000, fix: .init(timeMs: fix.timeMs, lat: lat, lon: 10)))
            return fix
        }
        #expect(router.route(at(0, lat: 59), nowMs: 0)?.alarm == nil)
        #expect(router.route(at(1, lat: 59), nowMs: 1000)?.alarm == nil)
        // A jump (spoofed at once), then a late fix of second 1 again: not it, the next newer one.
        _ = at(2, lat: 59.1)
        #expect(router.route(at(1, lat: 59.1), nowMs: 2000)?.alarm == nil)
        #expect(router.route(at(3, lat: 59.1), nowMs: 3000)?.alarm == "tampering")
        #expect(router.route(at(4, lat: 59.1), nowMs: 4000)?.alarm == nil)
    }
}

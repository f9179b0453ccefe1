import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import Testing

@testable import GeoRelayForward

/// A vessel at 5 m/s, a fix a second, on a slowly turning course (45° ± 30° over 20 minutes).
func voyage(_ device: String, seconds: Range<Int>, alarmAt: Int? = nil) -> [Position] {
    var lat = 59.9
    var lon = 10.7
    var track: [Position] = []
    for second in 0..<seconds.upperBound {
        let course = 45 + 30 * sin(Double(second) / 190)
        if second >= seconds.lowerBound {
            track.append(
                Position(
                    device: device, timeMs: 1_784_953_800_000 + Int64(second) * 1000, lat: lat, lon: lon, speed: 5,
                    course: course, alarm: second == alarmAt ? "sos" : nil))
        }
        lat += 5 * cos(course * .pi / 180) / 111_195
        lon += 5 * sin(course * .pi / 180) / (111_195 * cos(lat * .pi / 180))
    }
    return track
}

/// The length of a track, fix to fix.
func pathLength(_ track: some Collection<Position>) -> Double {
    zip(track, track.dropFirst()).reduce(0) {
        $0 + Geo.distance(lat1: $1.0.lat, lon1: $1.0.lon, lat2: $1.1.lat, lon2: $1.1.lon)
    }
}

/// What Traccar makes of a two-hour outage's backlog, through the model of its processing
/// (`TraccarModel`): its events, its summary report and its `totalDistance`.
@Suite(.offThePool) struct OutageOrderTests {
    /// Ten minutes under way, then two hours while the link is down.
    static let voyage = GeoRelayForwardTests.voyage("vessel", seconds: 0..<7800)
    static let outage = voyage[600...]

    /// The vessel's first ten minutes delivered, then two hours of fixes stored while the link was
    /// down, then the drain; returns Traccar's view of the vessel and the destination's status.
    func drain(_ f: SpoolFixture, server: () -> TraccarModel, forwarder: (() async throws -> Void) async throws -> Void)
        async throws -> (TraccarModel, SpoolStatus.Destination)
    {
        try await drain(
            spool: f.spool, drained: { try await f.waitForStatus { $0.pending == 0 } }, server: server,
            forwarder: forwarder)
    }

    /// As above, for a fixture on the simulated network (over its transport).
    func drain(_ f: SimulatedForwardFixture) async throws -> (TraccarModel, SpoolStatus.Destination) {
        try await drain(
            spool: f.spool, drained: { try await f.waitForStatus { $0.pending == 0 } }, server: { f.model() },
            forwarder: { try await f.withForwarder($0) })
    }

    private func drain(
        spool: Spool, drained: @escaping () async throws -> SpoolStatus.Destination, server: () -> TraccarModel,
        forwarder: (() async throws -> Void) async throws -> Void
    ) async throws -> (TraccarModel, SpoolStatus.Destination) {
        _ = await spool.append(Array(Self.voyage[..<600]))
        try await forwarder { _ = try await drained() }
        _ = await spool.append(Array(Self.outage))
        var status: SpoolStatus.Destination?
        try await forwarder { status = try await drained() }
        return (server(), try #require(status))
    }

    /// What the device's `totalDistance` gained from its latest before the outage to its latest
    /// after, and the path sailed between those two fixes.
    static func totalDistanceOverTheOutage(_ vessel: TraccarModel.Device) throws -> (gained: Double, sailed: Double) {
        let before = try #require(
            vessel.processed.filter { $0.arrival.fixTimeMs < outage.first!.timeMs }
                .max { $0.arrival.fixTimeMs < $1.arrival.fixTimeMs })
        let after = try #require(vessel.latest)
        let sailed = pathLength(
            voyage.filter { (before.arrival.fixTimeMs...after.arrival.fixTimeMs).contains($0.timeMs) })
        return (after.totalDistance - before.totalDistance, sailed)
    }

    /// The summary report over the outage (Traccar's `calculateDistance`) within 1 % of the path.
    static func expectTheReportOverTheOutage(_ vessel: TraccarModel.Device) throws {
        let sailed = pathLength(outage)
        let report = try #require(vessel.reportDistance(fromMs: outage.first!.timeMs, toMs: outage.last!.timeMs))
        #expect(abs(report - sailed) / sailed < 0.01, "report \(report) m, sailed \(sailed) m")
    }

    /// On a simulated LAN (a seed varies only the server's time over each request there).
    @Test(arguments: Configuration.DrainOrderSetting.allCases, SimulationSeed.all(1))
    func osmAnd(order: Configuration.DrainOrderSetting, seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .lan, seed: seed) {
            $0.filter = FilterSettings()
            $0.order = order
        }
        let (traccar, status) = try await drain(f)
        let vessel = try #require(traccar.devices["vessel"])
        // History first: every position reaches the event handlers. Current first: the history behind
        // it does not, and status counts exactly what the model skipped.
        if order == .currentFirst {
            #expect(vessel.skippedByEvents > 100)
        } else {
            #expect(vessel.skippedByEvents == 0)
        }
        #expect(status.behindNewer == Int64(vessel.firstArrivalsSkipped))
        // In any order: the report over the outage by the odometer, and the device's totalDistance
        // by the `distance` sent with the position that became the latest, within 1 % of the path.
        try Self.expectTheReportOverTheOutage(vessel)
        let (gained, sailedSince) = try Self.totalDistanceOverTheOutage(vessel)
        #expect(abs(gained - sailedSince) / sailedSince < 0.01, "totalDistance +\(gained) m, sailed \(sailedSince) m")
    }

    @Test(arguments: [Configuration.DrainOrderSetting.auto, .currentFirst], SimulationSeed.all(1))
    func teltonika(order: Configuration.DrainOrderSetting, seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .lan, seed: seed, transport: .teltonika) {
            $0.filter = FilterSettings()
            $0.order = order
        }
        let (traccar, _) = try await drain(f)
        let vessel = try #require(traccar.devices["vessel"])
        // IO 16 carries the odometer: the report is right in either order.
        try Self.expectTheReportOverTheOutage(vessel)
        let (gained, sailedSince) = try Self.totalDistanceOverTheOutage(vessel)
        if order == .auto {
            // In order, Traccar chains fix to fix: the path, to the filter's 75 m chords.
            #expect(vessel.skippedByEvents == 0)
            #expect(
                abs(gained - sailedSince) / sailedSince < 0.01, "totalDistance +\(gained) m, sailed \(sailedSince) m")
        } else {
            // No IO element carries `distance`: the current position's is the chord across the
            // outage, which docs/delivery.md says.
            #expect(vessel.skippedByEvents > 100)
            #expect(gained < sailedSince * 0.99)
        }
    }

    /// A fleet of 40 back from an outage, `auto`, on a link that carries the backlog in time (a
    /// simulated LAN): every unit's history in order, no event lost, over OsmAnd and Teltonika.
    @Test(arguments: [SimulatedForwardFixture.Transport.osmAnd, .teltonika], SimulationSeed.all(1))
    func aFleetsBacklogGoesInOrder(transport: SimulatedForwardFixture.Transport, seed: SimulationSeed) async throws {
        let devices = (0..<40).map { String(format: "35630704244%04d", $0) }
        let f = try await SimulatedForwardFixture(link: .lan, seed: seed, transport: transport)
        for device in devices { _ = await f.spool.append(movingTrack(device, count: 60)) }
        try await f.withForwarder {
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.sent == devices.count * 60, "\(f.replay("OutageOrderTests/aFleetsBacklogGoesInOrder"))")
        }
        let traccar = f.model()
        #expect(traccar.devices.count == devices.count)
        #expect(traccar.devices.values.map(\.processed.count).reduce(0, +) == devices.count * 60)
        #expect(traccar.skippedByEvents == 0)
    }

    /// An alarm in an outage's backlog raises its event in every order; while history goes first
    /// and the link's pace is known, it goes in its turn, so its history's events are kept too.
    /// On a simulated LAN (a seed varies only the server's time over each request there).
    @Test(arguments: Configuration.DrainOrderSetting.allCases, SimulationSeed.all(1))
    func anAlarmInTheBacklog(order: Configuration.DrainOrderSetting, seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .lan, seed: seed) {
            $0.filter = FilterSettings()
            $0.order = order
        }
        // Ten minutes delivered (the pace is measured), then an hour's outage with an SOS half-way.
        let track = GeoRelayForwardTests.voyage("vessel", seconds: 0..<4200, alarmAt: 2400)
        _ = await f.spool.append(Array(track[..<600]))
        try await f.withForwarder {
            try await f.waitForStatus { $0.pending == 0 }
            _ = await f.spool.append(Array(track[600...]))
            try await f.waitForStatus { $0.pending == 0 }
        }
        let traccar = f.traccar.traccar()
        let vessel = try #require(traccar.devices["vessel"])
        #expect(vessel.alarmsSkipped == 0)
        #expect(vessel.processed.contains { $0.alarmEvents == ["sos"] })
        if order != .currentFirst { #expect(vessel.skippedByEvents == 0) }
    }

    /// Live fixes while the history drains over a slow link (`current-first`) join the round
    /// (issue 36 §2; `OsmAndRoundTests` pins where each goes): what Traccar makes of it.
    /// They reach the server while history is still missing, the history behind them goes as
    /// history, and the report over the outage stays the path sailed.
    /// On a simulated link of 25 KB/s each way and 20 ms, from two seeds.
    @Test(arguments: SimulationSeed.all(2))
    func liveFixesJoinTheBackfillAndTheReportStaysRight(seed: SimulationSeed) async throws {
        // About 100 KB of history (the filter's 75 m chords of two hours) at 25 KB/s: seconds of drain.
        let link = LinkProfile(name: "25 KB/s", oneWay: .milliseconds(20), bytesPerSecond: 25_000)
        let f = try await SimulatedForwardFixture(link: link, seed: seed) {
            $0.filter = FilterSettings()
            $0.order = .currentFirst
        }
        let run = "OutageOrderTests/liveFixesJoinTheBackfillAndTheReportStaysRight"
        let server = f.traccar
        // The voyage goes on past the outage at 1 Hz. What the filter keeps of it in order is what
        // the server must end with; every other of those after the outage is written as the newest
        // of its stretch (150 m apart, past the live edge's filter), so the live fixes that join
        // are positions the in-order filter keeps too, and the backlog must filter through them.
        let track = GeoRelayForwardTests.voyage("vessel", seconds: 0..<7900)
        let filter = LocationFilter(settings: FilterSettings())
        var state = FilterState()
        let kept = track.filter { position in
            let (decision, next) = filter.evaluate(position, state: state)
            state = next
            if case .send = decision { return true }
            return false
        }
        let liveAt = kept.filter { $0.timeMs > track[7800].timeMs }.enumerated().filter { $0.offset % 2 == 1 }.map(
            \.element)
        let live = liveAt.map { fix in track.firstIndex { $0.timeMs == fix.timeMs }! }
        _ = await f.spool.append(Array(Self.voyage[..<600]))
        var arrivedBehind: [Int] = []
        try await f.withForwarder {
            try await f.waitForStatus { $0.pending == 0 }
            _ = await f.spool.append(Array(Self.outage))
            let outageStart = Self.outage.first!.timeMs
            let newestOfOutage = Self.outage.last!.timeMs
            let began = try await f.waitForArrivals {
                $0.contains { $0.fixTimeMs >= outageStart && $0.fixTimeMs < newestOfOutage }
            }
            #expect(began, "the history began to drain, \(f.replay(run))")
            var written = 7800
            for index in live {
                _ = await f.spool.append(Array(track[written...index]))
                written = index + 1
                let fix = track[index]
                let arrived = try await f.waitForArrivals { $0.contains { $0.fixTimeMs == fix.timeMs } }
                #expect(arrived, "live fix \(fix.timeMs), \(f.replay(run))")
                // History still to come when it arrived: the outage's fixes the filter keeps, less those in.
                arrivedBehind.append(
                    server.positions.count { $0.fixTimeMs >= outageStart && $0.fixTimeMs < newestOfOutage })
            }
            try await f.waitForStatus { $0.pending == 0 }
        }
        let historyDelivered = server.positions.count {
            $0.fixTimeMs >= Self.outage.first!.timeMs && $0.fixTimeMs < Self.outage.last!.timeMs
        }
        #expect(
            arrivedBehind.contains { $0 < historyDelivered },
            "a live fix reached the server while history was still draining: \(arrivedBehind) of \(historyDelivered), \(f.replay(run))"
        )
        let vessel = try #require(server.traccar().devices["vessel"])
        #expect(
            vessel.latest?.arrival.fixTimeMs == track[live.last!].timeMs, "the server's newest is the last live fix")
        // Whatever went ahead, the server has every position the filter keeps in order.
        let arrived = Set(server.positions.map(\.fixTimeMs))
        let missing = kept.filter { $0.timeMs <= track[live.last!].timeMs && !arrived.contains($0.timeMs) }
        #expect(missing.isEmpty, "\(missing.count) of the in-order filter's positions missing")
        try Self.expectTheReportOverTheOutage(vessel)
    }
}

import Foundation
import Testing
import GeoRelayCore
@testable import GeoRelaySpool

/// `georelay replay` through a destination's filter decides as the destination did: over whole
/// positions, alarms and a collector's explicit `motion` included (the spool used to rebuild each
/// from six columns, so a replay skipped the alarm the live delivery had sent).
@Suite struct ReplayQueueTests {
    @Test func aReplayThroughTheFilterKeepsAlarmsAndExplicitMotion() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        try await spool.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        // A minute at a mooring: the filter sends the first fix, the alarm, and the collector's
        // explicit word that the boat has stopped; nothing else moves far or long enough.
        var positions = (0..<60).map { fix("boat", Int64($0)) }
        positions[20].alarm = "sos"
        positions[40].attributes = [Attribute("motion", .bool(false))]
        _ = await spool.append(positions)
        spool.close()
        let filter = LocationFilter(settings: FilterSettings())
        let report = try Spool.queueReplay(path: fixture.settings.path, destination: "traccar", device: nil,
                                           sinceMs: positions[0].timeMs, untilMs: positions[59].timeMs, choose: { filter.replayChoice() })
        let reader = try SpoolReader.open(path: fixture.settings.path)
        let queued = try reader.replayQueue(destination: "traccar", limit: 100).map(\.position.timeMs)
        #expect(report.considered == 60)
        #expect(queued == [positions[0], positions[20], positions[40]].map(\.timeMs), "\(queued)")
        // What a live delivery through the same filter sends, for the same positions.
        let choice = filter.replayChoice()
        #expect(positions.filter(choice).map(\.timeMs) == queued)
    }
}

import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayService

/// `georelay replay` through a destination's filter decides as the destination did: over whole
/// positions, alarms and a collector's explicit `motion` included (the spool used to rebuild each
/// from six columns, so a replay skipped the alarm the live delivery had sent).
@Suite(.offThePool) struct ReplaySelectionTests {
    final class World {
        let directory: String
        var configuration = Configuration()
        init() throws {
            var template = Array("/tmp/grr.XXXXXX".utf8CString)
            directory = String(cString: template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!)! })
            configuration.spool.path = directory + "/georelay.db"
        }
        deinit { try? FileManager.default.removeItem(atPath: directory) }
    }

    static func fix(_ second: Int64, device: String = "boat") -> Position {
        Position(device: device, timeMs: 1_784_953_800_000 + second * 1000, lat: 59, lon: 10, speed: 1.5)
    }

    @Test func aReplayThroughTheFilterKeepsAlarmsAndExplicitMotion() async throws {
        let world = try World()
        let spool = try Spool(settings: Spool.Settings(path: world.configuration.spool.path))
        try await spool.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        // A minute at a mooring: the filter sends the first fix, the alarm, and the collector's
        // explicit word that the boat has stopped; nothing else moves far or long enough.
        var positions = (0..<60).map { Self.fix($0) }
        positions[20].alarm = "sos"
        positions[40].attributes = [Attribute("motion", .bool(false))]
        // A source receiver of a multi-source device is never forwarded as itself, so never replayed.
        _ = await spool.append(positions + [Self.fix(10, device: "gps-bow")])
        spool.close()
        world.configuration.devices = [Configuration.DeviceSources(id: "boatx", sources: ["gps-bow"])]
        let filter = LocationFilter(settings: FilterSettings())
        let selection = ReplaySelection(
            sinceMs: positions[0].timeMs - 5000, untilMs: positions[59].timeMs, filter: filter)
        let report = try await Commands.queueReplay(
            configuration: world.configuration, destination: "traccar", selection: selection)
        let reader = try SpoolReader.open(path: world.configuration.spool.path)
        let queued = try reader.replayQueue(destination: "traccar", limit: 100).map(\.position.timeMs)
        #expect(report.considered == 60)
        #expect(report.queued == 3)
        #expect(queued == [positions[0], positions[20], positions[40]].map(\.timeMs), "\(queued)")
        #expect(report.evicted.map(\.device) == ["boat"], "the window starts 5 s before the oldest fix")
        // What a live delivery through the same filter sends, for the same positions.
        let choice = filter.replayChoice()
        #expect(positions.filter(choice).map(\.timeMs) == queued)
    }

    @Test func withoutAFilterTheWholeWindowOfOneDeviceIsQueued() async throws {
        let world = try World()
        let spool = try Spool(settings: Spool.Settings(path: world.configuration.spool.path))
        try await spool.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        _ = await spool.append((0..<20).map { Self.fix($0) } + (0..<20).map { Self.fix($0, device: "dinghy") })
        spool.close()
        let selection = ReplaySelection(sinceMs: Self.fix(5).timeMs, untilMs: Self.fix(14).timeMs, device: "dinghy")
        let report = try await Commands.queueReplay(
            configuration: world.configuration, destination: "traccar", selection: selection)
        #expect(report.queued == 10 && report.considered == 10 && report.evicted.isEmpty)
        let queued = try SpoolReader.open(path: world.configuration.spool.path).replayQueue(
            destination: "traccar", limit: 100)
        #expect(queued.map(\.position.device) == Array(repeating: "dinghy", count: 10))
    }
}

import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// A fleet behind one geostationary link over Traccar's Teltonika port (issue 51): 40 units with
/// a fix every 5 s, two hours of outage behind a terminal that answers the handshake itself while
/// its satellite is down, then the link back with the fixes still coming. Every unit's current
/// position is to reach the server soon after the return, and the backlog at the link's pace.
@Suite(.offThePool) struct TeltonikaFleetTests {
    struct Figures: CustomStringConvertible {
        /// From the link's return until the server had a position of every unit no older than 20 s
        /// before it (the bench's definition).
        var everyUnitCurrent: Duration?
        /// Until the last position from before the return was stored.
        var drained: Duration?
        /// What the bytes of the drain take on the link alone, plus a round trip each way.
        var limit: Duration
        var positions: Int
        var description: String {
            let ratio = drained.map { String(format: "%.2f", $0 / limit) } ?? "-"
            return
                "every unit current \(everyUnitCurrent.map { "\($0)" } ?? "never"), drained \(drained.map { "\($0)" } ?? "never") (\(ratio) x the limit \(limit)), \(positions) positions"
        }
    }

    /// The long form's outage is the issue's: two hours, a fix every 5 s. `make test`'s is 20
    /// minutes: a backlog of about 13 s on the link, longer than history's 8 s before the give-way.
    static let long = ProcessInfo.processInfo.environment["GEORELAY_LONG_TESTS"] != nil
    static let outageMinutes: Int64 = long ? 120 : 20
    static let fixSeconds: Int64 = 5
    static let kinds: [TerminalKind] = long ? TerminalKind.allCases : [.close, .drop]
    /// The fleet's drain is the suite's heaviest simulation: the issue's terminal in `make test`.
    static let fleetKinds: [TerminalKind] = long ? TerminalKind.allCases : [.close]

    /// - Parameter named: each unit's id (IMEIs by default).
    static func outage(
        units: Int, kind: TerminalKind, seed: SimulationSeed,
        named: (Int) -> String = { String(format: "35630704244%04d", $0) },
        configure: (inout Configuration.DestinationSettings) -> Void = { _ in }
    ) async throws -> (Figures, SimulatedForwardFixture) {
        let devices = (0..<units).map(named)
        let f = try await SimulatedForwardFixture(
            link: .geo, seed: seed, transport: .teltonika, concurrency: Configuration.teltonikaConcurrency
        ) { settings in
            let defaults = Configuration.DestinationSettings()
            settings.backoffMinSeconds = defaults.backoffMinSeconds
            settings.backoffMaxSeconds = defaults.backoffMaxSeconds
            settings.probeIntervalSeconds = defaults.probeIntervalSeconds
            settings.requestTimeoutSeconds = defaults.requestTimeoutSeconds
            settings.connectTimeoutSeconds = defaults.connectTimeoutSeconds
            configure(&settings)
        }
        let clock = f.world.clock
        var step = 0
        /// Each unit's fixes of the last `seconds`, one every `fixSeconds`, the last one now.
        func fixes(seconds: Int64 = fixSeconds) -> [Position] {
            let nowMs = clock.nowMs()
            let count = Int(seconds / Self.fixSeconds)
            let agos: [Int64] = (0..<count).reversed().map { Int64($0) * Self.fixSeconds }
            return agos.flatMap { (ago: Int64) -> [Position] in
                step += 1
                return devices.enumerated().map { index, device in
                    Position(
                        device: device, timeMs: nowMs - ago * 1000,
                        lat: 59.9 + Double(step) * 1e-4 + Double(index) * 1e-3,
                        lon: 10.7 + Double(step) * 1e-4, speed: 5, course: 45)
                }
            }
        }
        var figures = Figures(limit: .zero, positions: 0)
        try await f.withForwarder {
            _ = await f.spool.append(fixes())
            try await f.waitForStatus { $0.pending == 0 }
            f.world.network.setDown(kind)
            // The outage's fixes, five minutes at a time, while the relay watches for the link.
            for _ in 0..<(outageMinutes / 5) {
                try await f.world.advance(by: .seconds(300))
                _ = await f.spool.append(fixes(seconds: 300))
            }
            let back = clock.now()
            let backMs = clock.nowMs()
            let before = f.world.network.counters
            f.world.network.setDown(nil)
            var seen = 0
            var current: Set<String> = []
            var held = 0
            let historyTotal = devices.count * Int(outageMinutes * 60 / fixSeconds + 1)
            var counters = before
            for _ in 0..<(600 / fixSeconds) {
                _ = await f.spool.append(fixes())
                try await f.world.run(for: .seconds(fixSeconds)) {
                    let new = f.teltonika.positions(from: seen)
                    seen += new.count
                    for stored in new {
                        if stored.fixTimeMs >= backMs - 20_000 { current.insert(stored.uniqueId) }
                        if stored.fixTimeMs <= backMs { held += 1 }
                    }
                    if figures.everyUnitCurrent == nil, current.count == devices.count {
                        figures.everyUnitCurrent = back.duration(to: clock.now())
                    }
                    if figures.drained == nil, held >= historyTotal {
                        figures.drained = back.duration(to: clock.now())
                        counters = f.world.network.counters
                    }
                    return figures.drained != nil
                }
                if figures.drained != nil { break }
            }
            let bytes = max(counters.bytesUp - before.bytesUp, counters.bytesDown - before.bytesDown)
            figures.limit = .milliseconds(bytes * 1000 / LinkProfile.geo.bytesPerSecond) + LinkProfile.geo.roundTrip * 2
            figures.positions = held
        }
        return (figures, f)
    }

    /// Every unit's current position soon after the link's return, and the backlog within 1.25
    /// times what its bytes take on the link alone. Soon: the look that sees the return and the
    /// probe that proves it (about 2 s), history's 8 s from the first round (`order: auto`), the
    /// history still on the wire at the give-way (a round trip and a frame or two), then the
    /// current positions' round trip: 12 s, where the issue asks 10 (see its note). A backlog of
    /// seconds (`make test`'s) also carries what every return costs once.
    @Test(arguments: fleetKinds, SimulationSeed.all(1))
    func fortyUnits(kind: TerminalKind, seed: SimulationSeed) async throws {
        let (figures, f) = try await Self.outage(units: 40, kind: kind, seed: seed)
        let run = "\(f.replay("TeltonikaFleetTests/fortyUnits")), \(kind): \(figures)"
        print("teltonika fleet of 40, \(kind): \(figures)")
        let bound = figures.limit * 1.25 + (Self.long ? .zero : .seconds(4))
        #expect(figures.everyUnitCurrent.map { $0 <= .seconds(12) } == true, "\(run)")
        #expect(figures.drained.map { $0 <= bound } == true, "\(run)")
    }

    /// One vessel: its current position and backlog as soon, behind every kind of terminal.
    @Test(arguments: kinds, SimulationSeed.all(1))
    func oneUnit(kind: TerminalKind, seed: SimulationSeed) async throws {
        let (figures, f) = try await Self.outage(units: 1, kind: kind, seed: seed)
        let run = "\(f.replay("TeltonikaFleetTests/oneUnit")), \(kind): \(figures)"
        print("teltonika, one unit, \(kind): \(figures)")
        #expect(figures.everyUnitCurrent.map { $0 <= .seconds(8) } == true, "\(run)")
        #expect(figures.drained.map { $0 <= .seconds(10) } == true, "\(run)")
    }

    /// Ids shorter than ten characters ("unit0"): alone, their identification is under the 12
    /// bytes Traccar's frame decoder waits for, and would sit there unanswered until the request
    /// timeout. It goes with its first frame whenever a device gives way, so the fleet drains
    /// with no round timing out.
    @Test(arguments: SimulationSeed.all(1))
    func shortIdsIdentifyWithTheirFirstFrame(seed: SimulationSeed) async throws {
        let (figures, f) = try await Self.outage(units: 8, kind: .close, seed: seed, named: { "unit\($0)" })
        let run = "\(f.replay("TeltonikaFleetTests/shortIdsIdentifyWithTheirFirstFrame")): \(figures)"
        print("teltonika, eight units with short ids: \(figures)")
        let timeouts = f.log.messages.filter { $0.contains("no answer within") }
        #expect(timeouts.isEmpty, "\(timeouts.count) rounds timed out: \(timeouts.prefix(2)), \(run)")
        #expect(figures.drained.map { $0 <= figures.limit * 1.25 + .seconds(4) } == true, "\(run)")
        let identifications = f.teltonika.statistics.identifications
        #expect(identifications.allSatisfy { $0.known }, "\(run)")
    }
}

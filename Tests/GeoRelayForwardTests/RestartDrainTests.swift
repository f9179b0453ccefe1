import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// A relay restarted in the middle of a backfill whose current positions already went ahead
/// (issue 47 §3: the large spool's drain after a kill). The restarted destination starts its
/// drain order afresh: history first, then the give-way, and the give-way finds every newest at
/// the server already. It must count as given way; waiting for it made every later round end the
/// moment it began, and the drain crawled or stopped with the relay `online` and silent.
@Suite(.offThePool) struct RestartDrainTests {
    static let devices = 10
    static let perDevice = 100

    @Test(arguments: SimulationSeed.all(3))
    func aRestartAfterTheGiveWayDrainsTheRestAtTheLinksPace(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 1) {
            // Its give-way within 1.6 s: a small backlog crosses it on the geo link.
            $0.currentWithinSeconds = 2
        }
        let run = f.replay("RestartDrainTests")
        let names = (0..<Self.devices).map { "unit\($0)" }
        for name in names { _ = await f.spool.append(movingTrack(name, count: Self.perDevice)) }
        let newest = movingTrack("x", count: Self.perDevice).last!.timeMs
        let total = Self.devices * Self.perDevice
        let arrived = { Set(f.traccar.positions.map { "\($0.uniqueId) \($0.fixTimeMs)" }).count }

        // The first life: history, the give-way (every device's newest), some history behind it.
        try await f.withForwarder {
            let gaveWay = try await f.world.run(for: .seconds(120)) {
                let atServer = Set(f.traccar.positions.filter { $0.fixTimeMs == newest }.map(\.uniqueId))
                return atServer.count == Self.devices && arrived() >= total / 3
            }
            #expect(gaveWay, "the first life did not give way within 120 s, \(run)")
        }
        let before = arrived()
        try #require(before < total - 100, "the first life drained too much to show the second: \(before), \(run)")

        // The second life, on the same spool: the rest at the link's pace. Its bytes take about
        // 200 B a position at 32 kB/s, 4 to 5 s for what is left; 30 s of simulated time is far
        // past that and far short of a drain that ends each round as it begins.
        try await f.withForwarderLink { link in
            let started = f.world.clock.now()
            let drained = try await f.world.run(for: .seconds(30)) { arrived() == total }
            let took = started.duration(to: f.world.clock.now())
            #expect(
                drained,
                "after the restart \(arrived() - before) of \(total - before) in \(took) of simulated time, \(run)")
            // A round of history, a give-way found done, a round of the rest: a few. Ending each
            // round as it began took over a thousand (they cost no simulated time, so only the
            // count shows them), and on a loaded machine none of them sent anything.
            #expect(link.roundsBegun <= 10, "\(link.roundsBegun) rounds for the rest of the drain, \(run)")
        }
        for name in names {
            #expect(f.traccar.orderProblem(name, archive: false) == nil, "\(name), \(run)")
        }
    }
}

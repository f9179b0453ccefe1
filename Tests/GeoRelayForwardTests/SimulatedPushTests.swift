import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The push destination whole (its login, token, batches, encodings and window) on a simulated
/// link to the fake gateway: the real forwarder and rounds, with no socket and no real second.
@Suite(.offThePool) struct SimulatedPushTests {
    /// A login, then every point of two devices in order, over a geostationary link.
    @Test(arguments: SimulationSeed.all(4))
    func aLoginThenEveryPointInOrder(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, transport: .push)
        let run = f.replay("SimulatedPushTests/aLoginThenEveryPointInOrder")
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("bow", count: 40, alarmAt: 3) + movingTrack("stern", count: 40))
            try await f.waitForStatus { $0.pending == 0 }
        }
        let points = f.gateway.points
        #expect(points.count == 80, "\(run)\n\(f.log.tail())")
        #expect(f.gateway.tokensIssued == 1 && f.gateway.logins == 1, "\(run)")
        #expect(f.gateway.problems.isEmpty, "\(f.gateway.problems), \(run)")
        for device in ["bow", "stern"] {
            let times = Set(points.filter { $0.trackerId.hasPrefix(device + "@") }.map(\.timestamp))
            #expect(times.count == 40, "\(device), \(run)")
        }
    }

    /// A backlog's last batch, not full, goes as soon as the link is back: its positions have
    /// waited out the outage already, and `batch.maxDelaySeconds` is for gathering live fixes
    /// into fewer requests, not for holding a drain's end.
    @Test(arguments: SimulationSeed.all(2))
    func aBacklogsTailGoesAtOnceWhenTheLinkReturns(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, transport: .push) {
            $0.push?.batchMaxDelaySeconds = 60
            $0.push?.batchMaxPositions = 50
        }
        let run = f.replay("SimulatedPushTests/aBacklogsTailGoesAtOnceWhenTheLinkReturns")
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("bow", count: 3))
            try await f.waitForStatus { $0.pending == 0 }
            f.world.network.setDown(.refuse)
            _ = await f.spool.append(movingTrack("bow", count: 120, from: 3))
            try await f.waitForStatus { $0.state == "probing" }
            f.world.network.setDown(nil)
            let back = f.world.clock.now()
            let drained = try await f.world.run(for: .seconds(120)) { f.gateway.points.count >= 123 }
            let took = f.world.clock.now() - back
            #expect(drained, "\(f.gateway.points.count) of 123 points at the gateway, \(run)")
            print("push, seed \(seed.value): 120 positions drained \(took) after the geo link returned")
            // Three batches and a trial over 600 ms round trips: seconds, against the 60 s delay.
            #expect(took < .seconds(15), "the drain took \(took) after the link returned, \(run)")
        }
    }
}

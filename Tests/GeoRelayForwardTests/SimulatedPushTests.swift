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
}

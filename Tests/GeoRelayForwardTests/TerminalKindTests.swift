import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The link's return seen at once on each kind of terminal (`../shared/LINKS.md`): one that
/// refuses while its satellite is down, one whose TCP accelerator answers the handshake on board
/// and closes, one that holds connections silent and carries them through, one that drops
/// everything. Probes and the backoff are a minute apart, so a return seen only by them shows.
@Suite(.offThePool) struct TerminalKindTests {
    static func outage(_ settings: inout Configuration.DestinationSettings) {
        settings.backoffMinSeconds = 60
        settings.backoffMaxSeconds = 120
        settings.probeIntervalSeconds = 60
        settings.requestTimeoutSeconds = 2
        settings.connectTimeoutSeconds = 2
    }

    /// Well within the probe a minute away; the figure a user feels is the bench's.
    static let seenWithin = Duration.seconds(10)

    /// OsmAnd and Teltonika on a geostationary link (300 ms each way) on simulated time: the outage
    /// and the watch's minute pass in milliseconds, and the return is timed on the clock the relay
    /// runs on, not on a loaded machine's (where an on-board answer could take longer than any
    /// round trip, and look like one that crossed the link).
    @Test(arguments: TerminalKind.allCases, SimulationSeed.all(2))
    func osmAnd(kind: TerminalKind, seed: SimulationSeed) async throws {
        try await Self.returnSeenOnTheSimulatedLink(.osmAnd, kind: kind, seed: seed, test: "osmAnd")
    }

    /// Push, its token and login across the same link: a return seen as soon, and no new login for it.
    @Test(arguments: TerminalKind.allCases, SimulationSeed.all(2))
    func push(kind: TerminalKind, seed: SimulationSeed) async throws {
        try await Self.returnSeenOnTheSimulatedLink(.push, kind: kind, seed: seed, test: "push")
    }

    @Test(arguments: TerminalKind.allCases, SimulationSeed.all(2))
    func teltonika(kind: TerminalKind, seed: SimulationSeed) async throws {
        try await Self.returnSeenOnTheSimulatedLink(.teltonika, kind: kind, seed: seed, test: "teltonika")
    }

    static func returnSeenOnTheSimulatedLink(
        _ transport: SimulatedForwardFixture.Transport, kind: TerminalKind, seed: SimulationSeed, test: String
    ) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, transport: transport, concurrency: 1) {
            Self.outage(&$0)
        }
        let run = f.replay("TerminalKindTests/\(test)") + ", \(kind)"
        let stored = {
            switch transport {
            case .osmAnd: Set(f.traccar.positions.map(\.fixTimeMs)).count
            case .teltonika: Set(f.teltonika.positions.map(\.fixTimeMs)).count
            case .push: Set(f.gateway.points.map(\.timestamp)).count
            }
        }
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 2))
            try await f.waitForStatus { $0.pending == 0 }
            f.world.network.setDown(kind)
            _ = await f.spool.append(movingTrack("a", count: 2, from: 2))
            try await f.waitForStatus { $0.state == "probing" }
            // The scenario itself: the watch in its steady state, with the link down.
            try await f.world.advance(by: .seconds(1))
            _ = await f.spool.append(movingTrack("a", count: 2, from: 4))
            try await f.world.advance(by: .seconds(1))
            #expect(stored() < 6, "\(kind): delivered while the link was down, \(run)")
            let back = f.world.clock.now()
            f.world.network.setDown(nil)
            let seen = try await f.world.run(for: .seconds(60)) { stored() >= 6 }
            let took = back.duration(to: f.world.clock.now())
            #expect(seen, "\(kind): the link's return was not seen within a minute, \(run)")
            #expect(took < Self.seenWithin, "\(kind): delivered \(took) after the link's return, \(run)")
        }
        if transport == .push {
            #expect(
                f.gateway.tokensIssued == 1 && f.gateway.logins == 1, "\(kind): logged in again for an outage, \(run)")
        }
    }
}

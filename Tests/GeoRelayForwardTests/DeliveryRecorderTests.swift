import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// One destination's hand-overs (issue 38): the meter alone says what the link billed, the
/// transports' count is the payload beside it, every hand-over spends the uplink's budget (a
/// probe's too), and what delivered something shows the destination online at the clock's time.
@Suite(.offThePool) struct DeliveryRecorderTests {
    /// 2026-12-05T12:00:00Z.
    static let noon: Int64 = 1_796_472_000_000

    struct Fixture {
        let directory: TemporaryDirectory
        let spool: Spool
        let clock = SimulatedClock(wallMs: DeliveryRecorderTests.noon)
        let meter = WireMeter()
        let gate = UplinkGate()
        let recorder: DeliveryRecorder

        init() async throws {
            directory = try TemporaryDirectory()
            var settings = Spool.Settings(path: directory.file("spool.db"))
            settings.clock = clock
            spool = try Spool(settings: settings)
            try await spool.register(destinations: [DestinationRegistration(name: "d", buffered: true)])
            gate.set(
                [:],
                allowances: [
                    "d": UplinkGate.Allowance(
                        uplink: "iridium", bytesLeft: 10_000,
                        whenSpent: .init(uplink: "iridium", minIntervalMs: 600_000, reason: "spent"))
                ])
            recorder = DeliveryRecorder(destination: "d", spool: spool, meter: meter, gate: gate, clock: clock)
        }

        func status() async throws -> SpoolStatus.Destination {
            _ = await spool.append([])
            return try #require(try spool.makeReader().status().destinations.first)
        }
    }

    @Test func aProbesBytesAreBilledAndSpendTheBudget() async throws {
        let f = try await Fixture()
        defer { f.spool.close() }
        f.meter.bill(500)
        var probe = DeliveryUpdate(destination: "d")
        probe.payloadBytes = 120
        f.recorder.record(probe)
        #expect(f.gate.bytesLeft(for: "d") == 9_500, "the link's bill, not the HTTP bytes, spends the budget")
        let status = try await f.status()
        #expect(status.wireBytes == 500)
        #expect(status.lastSuccessMs == nil, "a probe delivers nothing: it shows no success")
        #expect(f.meter.take() == 0, "billed once")
    }

    @Test func whatDeliveredShowsTheDestinationOnlineAtTheClocksTime() async throws {
        let f = try await Fixture()
        defer { f.spool.close() }
        f.recorder.record(.backoff, error: "no route to host", nextAttemptMs: Self.noon + 60_000)
        #expect(try await f.status().state == "backoff")
        f.clock.advance(by: .seconds(90))
        var delivered = DeliveryUpdate(destination: "d")
        delivered.sent = 3
        f.recorder.record(delivered)
        let status = try await f.status()
        #expect(status.state == "online")
        #expect(status.lastSuccessMs == Self.noon + 90_000, "the success at the recorder's clock, not the system's")
    }
}

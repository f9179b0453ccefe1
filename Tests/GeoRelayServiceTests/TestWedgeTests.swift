import GeoRelayService
import GeoRelayTestTraits
import Testing

@Suite(.offThePool) struct TestWedgeTests {
    @Test func parsesPartsDurationsAndDelays() throws {
        #expect(try TestWedge.parse("ingest:3") == [TestWedge(part: .ingest, duration: .seconds(3))])
        #expect(
            try TestWedge.parse("writer:8@3,ingest:0.5@12") == [
                TestWedge(part: .writer, duration: .seconds(8), after: .seconds(3)),
                TestWedge(part: .ingest, duration: .milliseconds(500), after: .seconds(12)),
            ])
    }

    @Test(arguments: [
        "forwarder:3", "ingest", "ingest:", "ingest:0", "ingest:-1", "ingest:x", "ingest:3@", "ingest:3@-1",
        "ingest:99999", "ingest:3@y",
    ])
    func refusesWhatItCannotRead(_ spec: String) {
        #expect(throws: RelayError.self) { try TestWedge.parse(spec) }
    }

    @Test func isInertUnlessTestHooksAreOn() throws {
        #expect(try FaultInjection.from(environment: [:]) == .none)
        #expect(
            try FaultInjection.from(environment: ["GEORELAY_TEST_WEDGE": "ingest:3"])
                == FaultInjection(ignored: ["GEORELAY_TEST_WEDGE"]))
        #expect(
            try FaultInjection.from(environment: [
                "GEORELAY_TEST_WEDGE": "ingest:3", "GEORELAY_TEST_CLOCK_SYNC": "synchronised",
                "GEORELAY_TEST_HOOKS": "yes",
            ]) == FaultInjection(ignored: ["GEORELAY_TEST_WEDGE", "GEORELAY_TEST_CLOCK_SYNC"]))
        #expect(
            try FaultInjection.from(environment: ["GEORELAY_TEST_WEDGE": "ingest:3", "GEORELAY_TEST_HOOKS": "1"])
                == FaultInjection(wedges: [TestWedge(part: .ingest, duration: .seconds(3))]))
        #expect(
            try FaultInjection.from(environment: [
                "GEORELAY_TEST_CLOCK_SYNC": "unsynchronised", "GEORELAY_TEST_HOOKS": "1",
            ])
                == FaultInjection(clockSync: .unsynchronised(maxErrorMs: 16_000)))
        #expect(throws: RelayError.self) {
            try FaultInjection.from(environment: ["GEORELAY_TEST_CLOCK_SYNC": "maybe", "GEORELAY_TEST_HOOKS": "1"])
        }
    }
}

import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayService

/// Status says per destination which uplink carries it, only when uplinks are configured.
@Suite(.offThePool) struct StatusUplinkTests {
    @Test func eachDestinationShowsTheUplinkItsRouteLeavesBy() throws {
        let configuration = try Configuration.parse(
            """
            { uplinks: [{ name: "loop", interface: "lo", metered: true }],
              destinations: [{ name: "local", url: "http://127.0.0.1:5055" }, { name: "nowhere", url: "http://no-such-host.invalid:5055" }] }
            """)
        let answers = StatusReport.uplinkAnswers(configuration)
        #expect(answers["local"] == .uplink(Configuration.Uplink(name: "loop", interface: "lo", metered: true)))
        guard case .unknown = answers["nowhere"] else {
            Issue.record(
                "an unresolvable destination's uplink is unknown, got \(String(describing: answers["nowhere"]))")
            return
        }
        #expect(
            StatusReport.uplinkAnswers(try Configuration.parse(#"{destinations: [{ url: "http://127.0.0.1:5055" }]}"#))
                .isEmpty,
            "without uplinks nothing is asked and no key is added")
    }
}

import Foundation
import GeoRelayTestTraits
import Testing
import GeoRelayCore
@testable import GeoRelayForward

/// The route to a destination, asked of the kernel without sending anything.
@Suite(.offThePool) struct UplinkRouteTests {
    @Test func loopbackLeavesByLo() {
        #expect(UplinkRoute.interface(toward: "127.0.0.1", port: 5055) == .success("lo"))
        #expect(UplinkRoute.answer(for: "http://127.0.0.1:5055", uplinks: [Configuration.Uplink(name: "loop", interface: "lo")])
                == .uplink(Configuration.Uplink(name: "loop", interface: "lo")))
        #expect(UplinkRoute.answer(for: "tcp://127.0.0.1:5027", uplinks: [Configuration.Uplink(name: "starlink", interface: "eth9")])
                == .otherInterface("lo"), "a route by an interface no uplink names is said as such")
    }

    @Test func aHostThatDoesNotResolveIsUnknownWithTheReason() {
        guard case .unknown(let reason) = UplinkRoute.answer(for: "https://no-such-host.invalid/", uplinks: [Configuration.Uplink(name: "a", interface: "lo")]) else {
            Issue.record("an unresolvable host has no uplink")
            return
        }
        #expect(reason.hasPrefix("no-such-host.invalid does not resolve"), "\(reason)")
    }
}

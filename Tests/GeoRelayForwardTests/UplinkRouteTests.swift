import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Synchronization
import Testing

@testable import GeoRelayForward

/// The route to a destination, asked of the kernel without sending anything.
@Suite(.offThePool) struct UplinkRouteTests {
    @Test func loopbackLeavesByLo() {
        #expect(UplinkRoute.interface(toward: "127.0.0.1", port: 5055) == .success("lo"))
        #expect(
            UplinkRoute.answer(
                for: "http://127.0.0.1:5055", uplinks: [Configuration.Uplink(name: "loop", interface: "lo")])
                == .uplink(Configuration.Uplink(name: "loop", interface: "lo")))
        #expect(
            UplinkRoute.answer(
                for: "tcp://127.0.0.1:5027", uplinks: [Configuration.Uplink(name: "starlink", interface: "eth9")])
                == .otherInterface("lo"), "a route by an interface no uplink names is said as such")
    }

    @Test func aHostThatDoesNotResolveIsUnknownWithTheReason() {
        guard
            case .unknown(let reason) = UplinkRoute.answer(
                for: "https://no-such-host.invalid/", uplinks: [Configuration.Uplink(name: "a", interface: "lo")])
        else {
            Issue.record("an unresolvable host has no uplink")
            return
        }
        #expect(reason.hasPrefix("no-such-host.invalid does not resolve"), "\(reason)")
    }
}

/// The running relay resolves a destination's name once per `AddressCache.keep`, not at each
/// look: every lookup may be a DNS query over the metered uplink itself.
@Suite(.offThePool) struct AddressCacheTests {
    @Test func aNameIsResolvedOncePerKeepAndAgainAfterAFailedRoute() throws {
        let calls = Mutex(0)
        let clock = SimulatedClock(wallMs: 0)
        let cache = AddressCache(
            resolve: { host, port in
                calls.withLock { $0 += 1 }
                return UplinkRoute.resolve(host: "127.0.0.1", port: port)
            }, clock: clock)
        let uplinks = [Configuration.Uplink(name: "loop", interface: "lo")]
        for _ in 0..<10 {
            #expect(
                UplinkRoute.answer(for: "http://tracker.example:5055", uplinks: uplinks, addresses: cache)
                    == .uplink(uplinks[0]))
        }
        #expect(calls.withLock { $0 } == 1, "ten looks, one lookup")
        clock.advance(by: AddressCache.keep)
        _ = UplinkRoute.answer(for: "http://tracker.example:5055", uplinks: uplinks, addresses: cache)
        #expect(calls.withLock { $0 } == 2, "resolved again once the entry is older than \(AddressCache.keep)")
        cache.forget(host: "tracker.example", port: 5055)
        _ = UplinkRoute.answer(for: "http://tracker.example:5055", uplinks: uplinks, addresses: cache)
        #expect(calls.withLock { $0 } == 3, "a forgotten entry is resolved again")
    }
}

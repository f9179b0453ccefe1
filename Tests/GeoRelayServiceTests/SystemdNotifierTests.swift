import GeoRelayService
import GeoRelayTestTraits
import Glibc
import Testing

@Suite(.offThePool) struct SystemdNotifierTests {
    @Test func watchdogTimeoutIsWatchdogUSecForThisProcessOnly() {
        #expect(SystemdNotifier(environment: [:]).watchdogTimeout == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "2000000"]).watchdogTimeout == .seconds(2))
        #expect(
            SystemdNotifier(environment: ["WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "\(getpid())"]).watchdogTimeout
                == .seconds(2))
        #expect(
            SystemdNotifier(environment: ["WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "\(getpid() + 1)"])
                .watchdogTimeout == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "0"]).watchdogTimeout == nil)
        #expect(SystemdNotifier(environment: ["WATCHDOG_USEC": "soon"]).watchdogTimeout == nil)
    }
}

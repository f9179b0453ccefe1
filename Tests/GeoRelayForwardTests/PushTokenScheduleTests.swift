import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// A stored token's schedule across a restart of the relay when the wall clock was stepped in
/// between: its age is kept on the machine's monotonic clock, so the restarted relay refreshes
/// it when it falls due, not as much later as the clock went back (the voyage simulation found
/// pushes with an expired token after a step back and a restart).
@Suite(.offThePool) struct PushTokenScheduleTests {
    @Test(arguments: [true, false])
    func aStoredTokenIsRefreshedOnItsScheduleAfterTheWallClockWentBack(sameBoot: Bool) async throws {
        let clock = SimulatedClock(wallMs: 1_767_225_600_000)
        let origin = clock.monotonicMs()
        // The gateway's own time: the world's, which the box's wall clock steps do not move.
        let gateway = try FakePushServer { 1_767_225_600_000 + clock.monotonicMs() - origin }
        defer { gateway.http.stop() }
        gateway.setExpiresIn(86_400)
        let settings = gateway.destination()
        let directory = try TemporaryDirectory()
        let store = TokenStore(spoolPath: directory.file("spool.db"), destination: "push")
        func life(_ clock: SimulatedClock) throws -> PushAuthenticator {
            PushAuthenticator(
                settings: settings, store: store, worker: try HTTPWorker(label: "test.auth"), logger: .disabled,
                now: clock.steadyWall(), clock: clock)
        }

        let first = try await life(clock).token()
        #expect(gateway.tokensIssued == 1)
        // 23 hours on, the box's clock is stepped back two hours, and the relay restarts; after
        // a reboot the monotonic clock starts again and only the stored wall times are left.
        clock.advance(by: .seconds(23 * 3600))
        clock.stepWall(byMs: -2 * 3_600_000)
        let restartedClock = sameBoot ? clock : SimulatedClock(wallMs: clock.nowMs(), boot: "the next boot")
        let restarted = try life(restartedClock)
        #expect(try await restarted.token() == first, "a day-old token is used again after a restart")
        let due = try #require(await restarted.refreshDueMs())
        let schedule = restartedClock.steadyWall()
        if sameBoot {
            // Due 5 minutes before its 24 hours, on the world's time: 55 minutes from now.
            #expect(due - schedule() == 55 * 60_000, "refresh due \((due - schedule()) / 60_000) min from now")
            clock.advance(by: .seconds(3600))
            #expect(try await restarted.token() != first, "refreshed on its schedule, before the gateway's expiry")
            #expect(gateway.tokensIssued == 2)
        } else {
            // Another boot: the wall times are all there is; the step back makes the token look
            // two hours younger (a push with it then draws a 401 and a new token).
            #expect(due - schedule() == 175 * 60_000, "refresh due \((due - schedule()) / 60_000) min from now")
        }
    }
}

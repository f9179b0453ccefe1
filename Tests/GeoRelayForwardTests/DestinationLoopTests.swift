import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The destination's loop as a value without I/O (issue 38): what every transport does between
/// its rounds, decided in one place.
@Suite(.offThePool) struct DestinationLoopTests {
    static let spent = UplinkGate.Restriction(
        uplink: "iridium", minIntervalMs: 600_000, reason: "iridium's day budget is spent")

    func loop() -> DestinationLoop {
        DestinationLoop(backoff: Backoff(minSeconds: 5, maxSeconds: 300), route: 0, random: RandomSource(seed: 47))
    }

    static let fullRound = DestinationLoop.Action.round(.init(trial: false, restriction: nil))

    @Test func aTurnOnTheSameRouteIsARoundAndNothingElse() {
        var loop = loop()
        #expect(loop.handle(.turn(route: 0, restriction: nil)) == [Self.fullRound])
        #expect(loop.handle(.ended(.idle(.seconds(30)))) == [.idle(.seconds(30))])
        #expect(loop.handle(.ended(.again)) == [.next])
    }

    /// Real time shows itself online once ready, and what it drops in status, and never backs off
    /// (that would hold what arrives meanwhile) nor tries with a trial.
    @Test func realTimeRecordsWhatItDropsAndNeverBacksOff() {
        var loop = loop()
        #expect(loop.handle(.ended(.ready)) == [.record(.online, error: nil), .next])
        #expect(loop.handle(.ended(.triedOnce(delivered: 3, dropped: 0))) == [.next])
        #expect(
            loop.handle(.ended(.triedOnce(delivered: 1, dropped: 2))) == [
                .log(.warning, "real-time destination dropped 2 of 3 positions (buffer is off)"),
                .record(.backoff, error: "dropped 2 positions"), .next,
            ])
        #expect(loop.handle(.turn(route: 0, restriction: nil)) == [Self.fullRound], "no trial after drops")
    }

    @Test func aMovedRouteForgetsTheConnectionsOnce() {
        var loop = loop()
        let moved = loop.handle(.turn(route: 1, restriction: nil))
        #expect(moved.first == .forgetConnections)
        #expect(moved.last == Self.fullRound)
        #expect(loop.handle(.turn(route: 1, restriction: nil)) == [Self.fullRound], "the same route: kept")
    }

    @Test func noAnswerBacksOffAndATrialFollowsUnlessAProbeProvedTheServer() {
        var loop = loop()
        _ = loop.handle(.turn(route: 0, restriction: nil))
        let failed = loop.handle(.ended(.unavailable(reason: "connection refused", retryAfter: nil, transport: true)))
        #expect(failed == [.backOff(reason: "connection refused", retryAfter: nil, transport: true)])
        #expect(loop.state == .probing)
        #expect(loop.handle(.resumed(.trial)) == [.next])
        #expect(loop.handle(.turn(route: 0, restriction: nil)) == [.round(.init(trial: true, restriction: nil))])
        // The trial's answer: full rounds from here, and the log hears the return once.
        #expect(loop.handle(.ended(.answered(delivered: 1))) == [.log(.notice, "delivering again"), .next])
        #expect(loop.state == .online && !loop.trial)
        #expect(loop.handle(.ended(.answered(delivered: 5))) == [.next])
        _ = loop.handle(.ended(.unavailable(reason: "timeout", retryAfter: nil, transport: true)))
        #expect(loop.handle(.resumed(.proven)) == [.next])
        #expect(loop.handle(.turn(route: 0, restriction: nil)) == [Self.fullRound], "a proven server: no trial")
        #expect(loop.handle(.resumed(.cancelled)) == [.stop])
    }

    @Test func aDeliveryResetsTheBackoffAndAnAnswerWithoutOneDoesNot() {
        var loop = loop()
        var random = SeededRandom(seed: 47)
        _ = loop.backoff.nextDelay(using: &random)
        _ = loop.backoff.nextDelay(using: &random)
        _ = loop.handle(.ended(.answered(delivered: 0)))
        #expect(loop.backoff.failures == 2, "every position refused: the server answers, but nothing moved")
        _ = loop.handle(.ended(.answered(delivered: 3)))
        #expect(loop.backoff.failures == 0)
    }

    @Test func aSpentBudgetIsLoggedOnceAndShownDeferredWhileItHolds() {
        var loop = loop()
        let first = loop.handle(.turn(route: 0, restriction: Self.spent))
        #expect(
            first == [
                .log(.notice, "backlog deferred: \(Self.spent.reason)"),
                .record(.deferred, error: Self.spent.reason), .round(.init(trial: false, restriction: Self.spent)),
            ])
        #expect(
            loop.handle(.turn(route: 0, restriction: Self.spent)) == [
                .round(.init(trial: false, restriction: Self.spent))
            ])
        // An alarm went: the recorder showed `online` for it, so the next turn shows `deferred` again.
        _ = loop.handle(.ended(.answered(delivered: 1)))
        #expect(
            loop.handle(.turn(route: 0, restriction: Self.spent)) == [
                .record(.deferred, error: Self.spent.reason), .round(.init(trial: false, restriction: Self.spent)),
            ])
        let lifted = loop.handle(.turn(route: 0, restriction: nil))
        #expect(lifted.count == 3 && lifted[1] == .record(.online, error: nil) && lifted[2] == Self.fullRound)
        #expect(loop.handle(.turn(route: 0, restriction: nil)) == [Self.fullRound], "lifted once")
    }

    @Test func refusedCredentialsShowAuthFailedAndWaitAsToldOrAsTheBackoffSays() {
        var loop = loop()
        let token = loop.handle(.ended(.refused(reason: "HTTP 401", seconds: 60)))
        #expect(
            token == [
                .log(.error, "authentication failed: HTTP 401"),
                .record(.authFailed, error: "HTTP 401", nextAttemptInSeconds: 60), .pause(seconds: 60),
            ])
        #expect(loop.state == .authFailed)
        #expect(loop.handle(.resumed(.trial)) == [.next])
        let login = loop.handle(.ended(.refused(reason: "HTTP 401", seconds: nil)))
        guard case .pause(let seconds) = login.last else {
            Issue.record("no pause: \(login)")
            return
        }
        #expect(seconds >= 4 && seconds <= 6, "the backoff's first delay, 5 s with its jitter")
    }
}

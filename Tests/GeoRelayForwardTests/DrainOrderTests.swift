import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// Which goes first while a device is behind, on a clock the test moves.
@Suite(.offThePool) struct DrainOrderTests {
    let start = RelayInstant(sinceOrigin: .seconds(1_000))

    @Test func autoSendsHistoryFirstUntilTheCurrentPositionCanWaitNoLonger() {
        var order = DrainOrder(setting: .auto, currentWithinSeconds: 10)
        #expect(!order.currentAhead(at: start))
        #expect(order.historyLeft(at: start) == nil)
        order.observe(.backlog, backfilling: true, at: start)
        #expect(!order.currentAhead(at: start + .seconds(7)))
        #expect(order.historyLeft(at: start + .seconds(7)) == .seconds(1))
        // At 80 % of the 10 s, the current positions go; the rest is history behind them.
        #expect(order.currentAhead(at: start + .seconds(8)))
        order.observe(.current, backfilling: true, at: start + .seconds(8))
        #expect(order.historyLeft(at: start + .seconds(9)) == nil)
        #expect(order.currentAhead(at: start + .seconds(9)))
        // Drained: the next backfill starts its own clock.
        order.observe(.backlog, backfilling: false, at: start + .seconds(20))
        #expect(!order.currentAhead(at: start + .seconds(20)))
        order.observe(.backlog, backfilling: true, at: start + .seconds(30))
        #expect(!order.currentAhead(at: start + .seconds(37)))
    }

    /// After a restart the order starts afresh, and at its give-way every newest is at the server
    /// already: that is a give-way done. Waiting for one left no history time in every later
    /// round, and each ended as it began (`RestartDrainTests`).
    @Test func aGiveWayFoundDoneAtTheServerIsDone() {
        var order = DrainOrder(setting: .auto, currentWithinSeconds: 10)
        order.observe(.backlog, backfilling: true, at: start)
        #expect(order.historyLeft(at: start + .seconds(8)) == .zero)
        order.observe(.backlog, backfilling: true, currentAtServer: true, at: start + .seconds(8))
        #expect(order.historyLeft(at: start + .seconds(8)) == nil, "no round ends for a give-way with nothing to give")
        #expect(order.currentAhead(at: start + .seconds(9)))
        #expect(order.liveEdge(at: start + .seconds(9), backfilling: true, joinable: true) == .join)
    }

    @Test func alarmsAndRepliesDoNotEndABackfillAndAFailedLinkRestartsTheClock() {
        var order = DrainOrder(setting: .auto, currentWithinSeconds: 10)
        order.observe(.backlog, backfilling: true, at: start)
        order.observe(.alarms, backfilling: false, at: start + .seconds(1))
        order.observe(.replay, backfilling: false, at: start + .seconds(2))
        #expect(order.currentAhead(at: start + .seconds(8)))
        order.linkFailed()
        order.observe(.backlog, backfilling: true, at: start + .seconds(60))
        #expect(!order.currentAhead(at: start + .seconds(67)))
    }

    /// A window carrying a backfill (push) sends live fixes ahead only when current positions go
    /// ahead at all, and not again within two round trips (a second at least).
    @Test func liveFixesGoAheadOfAWindowEveryTwoRoundTrips() {
        var order = DrainOrder(setting: .currentFirst, currentWithinSeconds: 10)
        order.observe(.backlog, backfilling: true, at: start)
        let rtt = Duration.milliseconds(600)
        #expect(order.currentDue(at: start, lastAheadAt: nil, roundTrip: rtt))
        #expect(!order.currentDue(at: start + .milliseconds(1_100), lastAheadAt: start, roundTrip: rtt), "within 1.2 s")
        #expect(order.currentDue(at: start + .milliseconds(1_200), lastAheadAt: start, roundTrip: rtt))
        #expect(!order.currentDue(at: start + .milliseconds(900), lastAheadAt: start, roundTrip: .milliseconds(10)))
        let historyFirst = DrainOrder(setting: .oldestFirst, currentWithinSeconds: 10)
        #expect(!historyFirst.currentDue(at: start, lastAheadAt: nil, roundTrip: rtt))
    }

    /// A round of history meets live fixes only in a backfill whose current positions go ahead:
    /// they join it where the transport takes them into a running round, and otherwise end it
    /// after ten of the last current round's durations, between 2 s and 10 s.
    @Test func theLiveEdgeOfARoundOfHistory() {
        var order = DrainOrder(setting: .currentFirst, currentWithinSeconds: 10)
        #expect(order.liveEdge(at: start, backfilling: false, joinable: true) == .none)
        order.observe(.backlog, backfilling: true, at: start)
        #expect(order.liveEdge(at: start, backfilling: true, joinable: true) == .join)
        #expect(order.liveEdge(at: start, backfilling: true, joinable: false) == .giveWay(after: .seconds(2)))
        order.currentRoundTook(.milliseconds(600))
        #expect(order.liveEdge(at: start, backfilling: true, joinable: false) == .giveWay(after: .seconds(6)))
        order.currentRoundTook(.seconds(5))
        #expect(order.liveEdge(at: start, backfilling: true, joinable: false) == .giveWay(after: .seconds(10)))
        var auto = DrainOrder(setting: .auto, currentWithinSeconds: 10)
        auto.observe(.backlog, backfilling: true, at: start)
        #expect(auto.liveEdge(at: start + .seconds(7), backfilling: true, joinable: true) == .none, "history's time")
        #expect(auto.liveEdge(at: start + .seconds(8), backfilling: true, joinable: true) == .join)
    }

    @Test func theFixedOrdersNeverChange() {
        var oldest = DrainOrder(setting: .oldestFirst, currentWithinSeconds: 10)
        var current = DrainOrder(setting: .currentFirst, currentWithinSeconds: 10)
        oldest.observe(.backlog, backfilling: true, at: start)
        current.observe(.backlog, backfilling: true, at: start)
        #expect(!oldest.currentAhead(at: start + .seconds(3600)))
        #expect(oldest.historyLeft(at: start) == nil)
        #expect(current.currentAhead(at: start))
        #expect(current.historyLeft(at: start) == nil)
    }

    @Test func thePaceCountsOnlyRoundsThatCarriedABacklog() {
        var pace = DeliveryPace()
        #expect(pace.positions(within: .seconds(1)) == 0)
        // A live fix a round measures the round trip, not the link.
        pace.record(delivered: 1, elapsed: .milliseconds(600))
        #expect(pace.positions(within: .seconds(1)) == 0)
        // 450 positions in 3 s: 150 a second, of which a second carries four fifths.
        pace.record(delivered: 450, elapsed: .seconds(3))
        #expect(pace.positions(within: .seconds(1)) == 120)
        pace.record(delivered: 100, elapsed: .zero)
        #expect(pace.positions(within: .seconds(1)) == 120)
    }
}

import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The live edge's own filter chain (`LiveJoin.keep`): a backfill's live fixes go as the
/// destination's filter would send them after the last live fix sent, across rounds.
@Suite(.offThePool) struct LiveJoinTests {
    /// Device 1 due north at 5 m/s from the history's last fix, a fix every 5 s.
    static func fix(_ seq: Int64, second: Int64) -> StoredPosition {
        StoredPosition(
            seq: seq, deviceID: 1, receivedMs: 0,
            position: Position(
                device: "d1", timeMs: 1_784_953_800_000 + second * 1000, lat: 59 + Double(second) * 5 / 111_195,
                lon: 10, speed: 5))
    }

    @Test func liveFixesGoAsTheFilterWouldSendThemAfterTheLastOneSent() {
        let filter = LocationFilter(settings: FilterSettings())
        let live = LiveJoin()
        let ledger = DeliveryLedger(destination: "traccar")
        // The first: nothing sent live yet, and the history is far behind.
        #expect(live.keep([Self.fix(100, second: 3600)], filter: filter, ledger: ledger).count == 1)
        // 25 m and 50 m on: within the filter's 75 m, and the same fix again goes once.
        #expect(live.keep([Self.fix(101, second: 3605)], filter: filter, ledger: ledger).isEmpty)
        #expect(live.keep([Self.fix(102, second: 3610)], filter: filter, ledger: ledger).isEmpty)
        #expect(live.keep([Self.fix(100, second: 3600)], filter: filter, ledger: ledger).isEmpty)
        // 100 m on, in a later round's look: the chain is the destination's, not the round's.
        #expect(live.keep([Self.fix(104, second: 3620)], filter: filter, ledger: ledger).map(\.seq) == [104])
        live.reset()
        #expect(
            live.keep([Self.fix(105, second: 3625)], filter: filter, ledger: ledger).count == 1,
            "a new backfill's live edge starts from what the ledger has sent")
    }

    @Test func aFixBelowTheAccuracyLevelIsNotSentLive() {
        var settings = FilterSettings()
        settings.accuracy = .high
        var fix = Self.fix(100, second: 3600)
        fix.position.accuracy = 500
        let live = LiveJoin()
        #expect(
            live.keep([fix], filter: LocationFilter(settings: settings), ledger: DeliveryLedger(destination: "t"))
                .isEmpty)
    }

    /// The backlog reaching a position that went ahead filters through it as in order: it sends
    /// what the in-order filter sends, whatever went ahead (the day at sea found 97 of the filter's
    /// positions missing and 150 others sent when a live fix the filter keeps was passed over).
    @Test func theBacklogFiltersThroughWhatWentAheadAsInOrder() {
        let filter = LocationFilter(settings: FilterSettings())
        var state = FilterState()
        state = filter.evaluate(Self.fix(1, second: 0).position, state: state).1
        // 40 m apart: 8, 16, 24, 32 s. In order the filter keeps 16 s (80 m) and 32 s (80 m on).
        let backlog = [8, 16, 24, 32].enumerated().map { Self.fix(Int64(2 + $0.offset), second: Int64($0.element)) }
        let inOrder = DevicePlan(backlog, state: state, filter: filter, traccarAttributes: false)
        #expect(inOrder.sends.map(\.stored.seq) == [3, 5])
        // 16 s went ahead (a live fix): the backlog sends 32 s, not 24 s (120 m from 0 s).
        let plan = DevicePlan(backlog, state: state, filter: filter, alreadySent: [3], traccarAttributes: false)
        #expect(plan.sends.map(\.stored.seq) == [5])
        // 8 s went ahead (the in-order filter skips it): the backlog is the in-order filter's.
        let skipped = DevicePlan(backlog, state: state, filter: filter, alreadySent: [2], traccarAttributes: false)
        #expect(skipped.sends.map(\.stored.seq) == [3, 5])
    }
}

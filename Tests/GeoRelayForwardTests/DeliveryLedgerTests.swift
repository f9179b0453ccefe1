import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// What the ledger sends ahead of a backlog: alarms it has not had, and under a spent budget the
/// still-alive minimum, judged against what it settled before the spool shows it.
@Suite(.offThePool) struct DeliveryLedgerTests {
    static func stored(_ seq: Int64, device: Int64 = 1, second: Int64, alarm: String? = nil) -> StoredPosition {
        StoredPosition(
            seq: seq, deviceID: device, receivedMs: 0,
            position: Position(
                device: "d\(device)", timeMs: 1_784_953_800_000 + second * 1000, lat: 59, lon: 10, alarm: alarm))
    }

    /// Real-time mode under a spent budget keeps a device's alarms and, when the still-alive
    /// minimum is due, its newest: the same rule as the buffered still-alive round (issue 38).
    @Test func realTimeUnderASpentBudgetKeepsAlarmsAndTheDueNewest() {
        let ledger = DeliveryLedger(destination: "traccar")
        func planned(_ seconds: [Int64], alarmAt: Int64? = nil) -> [Delivery] {
            seconds.map {
                Delivery(
                    stored: Self.stored($0, second: $0, alarm: $0 == alarmAt ? "sos" : nil), ackThrough: $0,
                    stateAfter: FilterState())
            }
        }
        let nothingSent = ledger.restricted(planned([1, 2, 3], alarmAt: 2), minIntervalMs: 600_000)
        #expect(nothingSent.map(\.stored.seq) == [2, 3], "the alarm, and the newest: the server has none yet")
        var sentOne = ledger
        var update = DeliveryUpdate(destination: "traccar")
        var first = planned([1])[0]
        first.stateAfter.newestSentMs = first.stored.position.timeMs
        sentOne.delivered(first, into: &update)
        #expect(
            sentOne.restricted(planned([2, 3, 4]), minIntervalMs: 600_000).isEmpty,
            "the newest 3 s after the server's: not due")
        #expect(sentOne.restricted(planned([2, 3, 700]), minIntervalMs: 600_000).map(\.stored.seq) == [700])
    }

    /// The spool still lists an alarm its backlog turn delivered (acknowledgements are held
    /// state): it is not sent ahead a second time.
    @Test func anAlarmSettledInItsTurnIsNotSentAheadAgain() {
        var ledger = DeliveryLedger(destination: "traccar")
        let alarm = Self.stored(3, second: 3, alarm: "sos")
        var update = DeliveryUpdate(destination: "traccar")
        ledger.delivered(
            Delivery(stored: Self.stored(4, second: 4), ackThrough: 4, stateAfter: FilterState()), into: &update)
        #expect(ledger.alarms((unsent: [alarm], sent: [])).ahead.isEmpty)
        // Another device's alarm is still owed.
        let other = Self.stored(5, device: 2, second: 5, alarm: "sos")
        #expect(ledger.alarms((unsent: [alarm, other], sent: [])).ahead.map(\.stored.seq) == [5])
    }

    /// Positions taken out of turn are skipped by the backlog, and forgotten once the device's
    /// cursor passes them (the spool may never list them: their commit can come with the cursor's).
    @Test func whatWasSentAheadIsForgottenOnceItsDevicesCursorPassesIt() {
        var ledger = DeliveryLedger(destination: "traccar")
        var update = DeliveryUpdate(destination: "traccar")
        for seq: Int64 in [14, 12, 13] {
            ledger.deliveredOutOfTurn(
                Delivery(stored: Self.stored(seq, second: seq), ackThrough: seq, stateAfter: FilterState()),
                into: &update)
        }
        ledger.deliveredOutOfTurn(
            Delivery(stored: Self.stored(30, device: 2, second: 30), ackThrough: 30, stateAfter: FilterState()),
            into: &update)
        #expect(update.acknowledged.isEmpty, "out of turn: no cursor moves")
        #expect(ledger.sentAhead == [12, 13, 14, 30])
        ledger.delivered(
            Delivery(stored: Self.stored(11, second: 11), ackThrough: 12, stateAfter: FilterState()), into: &update)
        #expect(ledger.sentAhead == [13, 14, 30], "device 1's cursor at 12")
        ledger.delivered(
            Delivery(stored: Self.stored(20, second: 20), ackThrough: 20, stateAfter: FilterState()), into: &update)
        #expect(ledger.sentAhead == [30], "device 2's is still ahead of its cursor")
    }

    @Test func theStillAliveMinimumIsCountedInDeviceTimeFromTheNewestTheServerHas() {
        var ledger = DeliveryLedger(destination: "traccar")
        // Nothing sent yet: the newest goes.
        #expect(
            ledger.stillAlive([Self.stored(9, second: 100)], minIntervalMs: 60_000, sent: []).map(\.stored.seq) == [9])
        var update = DeliveryUpdate(destination: "traccar")
        let first = ledger.stillAlive([Self.stored(9, second: 100)], minIntervalMs: 60_000, sent: [])[0]
        #expect(first.kind == .ahead)
        ledger.delivered(first, into: &update)
        #expect(update.sentAhead == [9], "recorded, so the backlog skips it")
        #expect(update.acknowledged.isEmpty, "nothing settled")
        // Once sent, not again; 59 s on, not due; 60 s on, due.
        #expect(ledger.stillAlive([Self.stored(9, second: 100)], minIntervalMs: 60_000, sent: []).isEmpty)
        #expect(ledger.stillAlive([Self.stored(10, second: 159)], minIntervalMs: 60_000, sent: []).isEmpty)
        #expect(
            ledger.stillAlive([Self.stored(11, second: 160)], minIntervalMs: 60_000, sent: []).map(\.stored.seq) == [11]
        )
        // An older fix arriving late (a phone's backlog) is not where the vessel is now.
        #expect(ledger.stillAlive([Self.stored(12, second: 10)], minIntervalMs: 60_000, sent: []).isEmpty)
    }

    static let everything: LocationFilter = {
        var settings = FilterSettings()
        settings.mode = .all
        return LocationFilter(settings: settings)
    }()

    /// Behind: a backlog spanning 30 s of fixes or more, or a chunk cut at its limit. The steady
    /// state's few seconds of fixes are not.
    @Test func aDeviceIsBehindWhenItsBacklogSpansHalfAMinuteOrFillsItsChunk() {
        let ledger = DeliveryLedger(destination: "traccar")
        let minute = (1...60).map { Self.stored(Int64($0), second: Int64($0)) }
        let moments = (1...5).map { Self.stored(Int64($0), device: 2, second: Int64($0)) }
        let cut = (1...2).map { Self.stored(Int64($0), device: 3, second: Int64($0)) }
        let behind = ledger.behind(
            [(minute, false), (moments, false), (cut, true), ([], false)], filter: Self.everything, alreadySent: [])
        #expect(behind == [1, 3])
        #expect(
            ledger.behind([(Array(minute.prefix(30)), false)], filter: Self.everything, alreadySent: []).isEmpty,
            "29 s is the steady state")
        #expect(ledger.behind([(Array(minute.prefix(31)), false)], filter: Self.everything, alreadySent: []) == [1])
    }

    /// A device behind has its newest sent ahead; its backlog then follows as history
    /// (`archive=true`), without the newest, and nothing goes ahead again.
    @Test func theNewestGoesAheadAndTheBacklogFollowsAsHistory() {
        var ledger = DeliveryLedger(destination: "traccar")
        let backlog = (1...60).map { Self.stored(Int64($0), second: Int64($0)) }
        let ahead = ledger.currentAhead([backlog[59]], sent: [])
        #expect(ahead.map(\.stored.seq) == [60] && ahead.allSatisfy { $0.kind == .ahead })
        var update = DeliveryUpdate(destination: "traccar")
        ledger.delivered(ahead[0], into: &update)
        #expect(ledger.currentAhead([backlog[59]], sent: []).isEmpty, "sent once")
        let sends = ledger.plan(
            backlog, filter: Self.everything, alreadySent: [], traccarAttributes: true, into: &update)
        #expect(sends.map(\.stored.seq) == Array(1...59))
        #expect(sends.allSatisfy { $0.stored.position.attributes.contains(Attribute("archive", .bool(true))) })
        // History already (the server has a newer fix): still behind, for a newer position to go ahead.
        #expect(ledger.behind([(Array(backlog.prefix(3)), false)], filter: Self.everything, alreadySent: []) == [1])
        #expect(ledger.currentAhead([Self.stored(61, second: 61)], sent: []).map(\.stored.seq) == [61])
    }

    /// A position the server refuses ahead of its backlog is not sent ahead again, and its turn
    /// in the backlog quarantines it without a second try.
    @Test func aPositionRefusedAheadIsQuarantinedInItsTurnWithoutASecondTry() {
        var ledger = DeliveryLedger(destination: "traccar")
        let backlog = (1...60).map { Self.stored(Int64($0), second: Int64($0)) }
        let ahead = ledger.currentAhead([backlog[59]], sent: [])
        var update = DeliveryUpdate(destination: "traccar")
        ledger.refused(ahead[0], reason: "HTTP 400", logger: .disabled, into: &update)
        #expect(update.quarantined.isEmpty, "quarantined in its turn, where the cursor passes it")
        #expect(ledger.currentAhead([backlog[59]], sent: []).isEmpty, "not ahead again")
        let sends = ledger.plan(
            backlog, filter: Self.everything, alreadySent: [], traccarAttributes: true, into: &update)
        #expect(sends.map(\.stored.seq) == Array(1...59))
        #expect(sends.last?.ackThrough == 60, "the cursor passes it with the position before it")
        #expect(
            update.quarantinedUnreached.map(\.seq) == [60] && update.quarantinedUnreached.first?.reason == "HTTP 400")
        #expect(update.quarantined.isEmpty, "recorded without moving the cursor past positions 1-59, still owed")
        // An alarm refused ahead is not offered ahead again either.
        let alarm = Self.stored(70, device: 2, second: 70, alarm: "sos")
        let alarms = ledger.alarms((unsent: [alarm], sent: []))
        ledger.refused(alarms.ahead[0], reason: "HTTP 400", logger: .disabled, into: &update)
        #expect(ledger.alarms((unsent: [alarm], sent: [])).ahead.isEmpty)
    }
}

/// The test kit's rule for delivery order, which most delivery tests lean on: it must catch what
/// it is there to catch.
@Suite struct DeliveryOrderTests {
    @Test func theRuleTellsCurrentFirstFromDisorder() {
        #expect(DeliveryOrder.problem([1, 2, 3, 4]) == nil, "oldest first")
        #expect(DeliveryOrder.problem([4, 1, 2, 3]) == nil, "the newest first, then history")
        #expect(DeliveryOrder.problem([1, 2, 6, 3, 7, 4, 5]) == nil, "live fixes between history")
        #expect(DeliveryOrder.problem([4, 2, 1, 3]) != nil, "history out of order")
        #expect(DeliveryOrder.problem([1, 1]) != nil, "a repeat")
        #expect(DeliveryOrder.history([4, 1, 5, 2]) == [1, 2])
        #expect(DeliveryOrder.problem([4, 1, 2], expected: [1, 2, 3, 4]) != nil, "one missing")
        // Two neighbours swapped pass the general rule; with everything stored up front, not.
        #expect(DeliveryOrder.problem([1, 3, 2, 4], expected: [1, 2, 3, 4]) == nil)
        #expect(DeliveryOrder.problem([1, 3, 2, 4], expected: [1, 2, 3, 4], onlyNewestAhead: true) != nil)
        #expect(DeliveryOrder.problem([4, 1, 2, 3], expected: [1, 2, 3, 4], onlyNewestAhead: true) == nil)
        #expect(DeliveryOrder.problem([1, 2, 4, 3], expected: [1, 2, 3, 4], onlyNewestAhead: true) == nil)
    }

    /// The simulation's reading, one arrival at a time, agrees with the rule over whole arrays.
    @Test func theFollowerAgreesWithTheRule() {
        func follow(_ arrivals: [Int64], expected: [Int64]) -> DeliveryOrder.Follower {
            var follower = DeliveryOrder.Follower()
            for fix in expected { follower.expect("d", fix) }
            for fix in arrivals { follower.arrived("d", fix) }
            return follower
        }
        for arrivals: [Int64] in [[1, 2, 3, 4], [4, 1, 2, 3], [1, 2, 4, 3], [4, 2, 1, 3], [3, 1, 4, 2]] {
            let follower = follow(arrivals, expected: [1, 2, 3, 4])
            #expect(
                follower.problems.isEmpty == (DeliveryOrder.problem(arrivals, expected: [1, 2, 3, 4]) == nil),
                "\(arrivals)")
            #expect(follower.missing.isEmpty && follower.repeats == 0)
        }
        let gappy = follow([1, 2, 2, 4], expected: [1, 2, 3, 4])
        #expect(gappy.repeats == 1, "a repeat is counted, not judged")
        #expect(gappy.missing.map(\.oldest) == [3], "the fix that never came is named")
    }
}

import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// What a round sends, for every transport, from a ledger and a table standing for the spool:
/// without sockets or SQLite, one decision at a time.
@Suite(.offThePool) struct RoundPlannerTests {
    /// A spool as a table: each device's positions in seq order, the cursors the spool has
    /// committed, the alarms it records as sent ahead, and the replay queue.
    final class TableSource: PendingSource {
        var stored: [StoredPosition] = []
        var acked: [Int64: Int64] = [:]
        var parkedUntil: [Int64: Int64] = [:]
        var alarmsSent: Set<Int64> = []
        var replays: [StoredPosition] = []

        /// `seconds` positions of `device`, one a second of fix time from `from`, seqs after the last.
        func add(device: Int64, seconds: Int, from: Int64 = 0, alarmAt: Int? = nil) {
            for second in 0..<seconds {
                let seq = Int64(stored.count + 1)
                stored.append(
                    DeliveryLedgerTests.stored(
                        seq, device: device, second: from + Int64(second), alarm: second == alarmAt ? "sos" : nil))
            }
        }

        func seqs(of device: Int64) -> [Int64] { stored.filter { $0.deviceID == device }.map(\.seq) }

        private func pending(_ p: StoredPosition) -> Bool { p.seq > acked[p.deviceID] ?? 0 }

        func pendingDevices(destination: String) throws(SpoolError) -> [DeviceCursor] {
            Set(stored.filter(pending).map(\.deviceID)).sorted().map { id in
                let mine = stored.filter { $0.deviceID == id }
                return DeviceCursor(
                    deviceID: id, device: "d\(id)", ackedSeq: acked[id] ?? 0, lastSeq: mine.last!.seq,
                    parkedUntilMs: parkedUntil[id], pending: mine.filter(pending).count)
            }
        }

        func pendingAlarms(destination: String) throws(SpoolError) -> (unsent: [StoredPosition], sent: Set<Int64>) {
            let alarms = stored.filter { pending($0) && $0.position.alarm != nil }
            return (alarms.filter { !alarmsSent.contains($0.seq) }, alarmsSent.intersection(alarms.map(\.seq)))
        }

        func newest(of cursors: [DeviceCursor]) throws(SpoolError) -> [StoredPosition] {
            cursors.compactMap { cursor in stored.last { $0.deviceID == cursor.deviceID } }
        }

        func positions(deviceID: Int64, device: String, after seq: Int64, limit: Int) throws(SpoolError)
            -> [StoredPosition]
        {
            Array(stored.filter { $0.deviceID == deviceID && $0.seq > seq }.prefix(limit))
        }

        func replayQueue(destination: String, limit: Int) throws(SpoolError) -> [StoredPosition] {
            Array(replays.prefix(limit))
        }
    }

    /// The planner's clock is the wall clock: a park the ledger records runs from it.
    static var nowMs: Int64 { WallClock.nowMs() }

    static func planner(
        restriction: UplinkGate.Restriction? = nil, allowance: AlarmAllowance = AlarmAllowance(),
        maxPositions: Int = .max, devicesPerTurn: Int? = nil, turnAfter: Int64 = 0, currentAhead: Bool = true,
        alarmInOrderPositions: Int = 0
    ) -> RoundPlanner {
        RoundPlanner(
            destination: "traccar", filter: DeliveryLedgerTests.everything, traccarAttributes: true,
            restriction: restriction, allowance: allowance, currentAhead: currentAhead,
            alarmInOrderPositions: alarmInOrderPositions, maxPositions: maxPositions,
            readBound: 8192, devicesPerTurn: devicesPerTurn, turnAfter: turnAfter, parkSeconds: 600, nowMs: nowMs)
    }

    /// One round's decision: which kind, and which seqs in which order.
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var spool: @Sendable (TableSource) -> Void
        var ledger: @Sendable (inout DeliveryLedger, TableSource) -> Void = { _, _ in }
        var planner: @Sendable () -> RoundPlanner = { RoundPlannerTests.planner() }
        var kind: RoundPlanner.Kind?
        var seqs: @Sendable (TableSource) -> [Int64]
        var testDescription: String { name }
    }

    static let budget = UplinkGate.Restriction(uplink: "iridium", minIntervalMs: 60_000, reason: "spent")

    static let cases: [Case] = [
        Case(name: "nothing stored: nothing to send", spool: { _ in }, kind: nil, seqs: { _ in [] }),
        Case(
            name: "the steady state (a few seconds a device): each device's backlog, oldest first",
            spool: {
                $0.add(device: 1, seconds: 3)
                $0.add(device: 2, seconds: 3)
            }, kind: .backlog,
            seqs: { $0.seqs(of: 1) + $0.seqs(of: 2) }),
        Case(
            name: "a device behind: its newest ahead of every device's history",
            spool: {
                $0.add(device: 1, seconds: 120)
                $0.add(device: 2, seconds: 3, from: 200)
            }, kind: .current,
            seqs: { [$0.seqs(of: 1).last!] }),
        Case(
            name: "its newest went ahead: the history follows, every device's, oldest first",
            spool: {
                $0.add(device: 1, seconds: 120)
                $0.add(device: 2, seconds: 3, from: 200)
            },
            ledger: { ledger, spool in sendAhead(spool.stored[119], in: &ledger) }, kind: .backlog,
            seqs: { Array($0.seqs(of: 1).dropLast()) + $0.seqs(of: 2) }),
        Case(
            name: "an alarm goes before everything",
            spool: {
                $0.add(device: 1, seconds: 120, alarmAt: 30)
                $0.add(device: 2, seconds: 3)
            }, kind: .alarms,
            seqs: { _ in [31] }),
        Case(
            name: "history first (DrainOrder): a device behind sends its backlog oldest first",
            spool: {
                $0.add(device: 1, seconds: 120)
                $0.add(device: 2, seconds: 3, from: 200)
            }, planner: { planner(currentAhead: false) }, kind: .backlog,
            seqs: { $0.seqs(of: 1) + $0.seqs(of: 2) }),
        Case(
            name: "history first, the alarm within what the link carries in a second: in its turn",
            spool: {
                $0.add(device: 1, seconds: 120, alarmAt: 30)
                $0.add(device: 2, seconds: 3)
            }, planner: { planner(currentAhead: false, alarmInOrderPositions: 40) }, kind: .backlog,
            seqs: { $0.seqs(of: 1) + $0.seqs(of: 2) }),
        Case(
            name: "history first, the alarm beyond what the link carries in a second: ahead",
            spool: {
                $0.add(device: 1, seconds: 120, alarmAt: 30)
                $0.add(device: 2, seconds: 3)
            }, planner: { planner(currentAhead: false, alarmInOrderPositions: 30) }, kind: .alarms,
            seqs: { _ in [31] }),
        Case(
            name: "current first: an alarm goes ahead whatever the pace (the current position would overtake it)",
            spool: {
                $0.add(device: 1, seconds: 120, alarmAt: 30)
                $0.add(device: 2, seconds: 3)
            }, planner: { planner(currentAhead: true, alarmInOrderPositions: 1000) }, kind: .alarms,
            seqs: { _ in [31] }),
        Case(
            name: "an alarm the spool records as sent is not sent again",
            spool: {
                $0.add(device: 1, seconds: 3, alarmAt: 1)
                $0.alarmsSent = [2]
            }, kind: .backlog,
            seqs: { _ in [1, 3] }),
        Case(
            name: "acknowledged in the ledger, not yet in the spool: nothing is sent again",
            spool: { $0.add(device: 1, seconds: 3) },
            ledger: { ledger, spool in acknowledge(spool.stored[2], in: &ledger) }, kind: nil, seqs: { _ in [] }),
        Case(
            name: "parked in the ledger, not yet in the spool: the device waits, the others go",
            spool: {
                $0.add(device: 1, seconds: 3)
                $0.add(device: 2, seconds: 3)
            },
            ledger: { ledger, spool in park(spool.stored[0], in: &ledger) }, kind: .backlog,
            seqs: { $0.seqs(of: 2) }),
        Case(
            name: "a parked device's alarm waits with it",
            spool: {
                $0.add(device: 1, seconds: 3, alarmAt: 1)
                $0.add(device: 2, seconds: 3)
            },
            ledger: { ledger, spool in park(spool.stored[0], in: &ledger) }, kind: .backlog,
            seqs: { $0.seqs(of: 2) }),
        Case(
            name: "a park deadline beyond one park period (the clock went back): tried now",
            spool: {
                $0.add(device: 1, seconds: 3)
                $0.parkedUntil[1] = nowMs + 3_600_000
            }, kind: .backlog,
            seqs: { $0.seqs(of: 1) }),
        Case(
            name: "a park that ran out: tried now",
            spool: {
                $0.add(device: 1, seconds: 3)
                $0.parkedUntil[1] = nowMs - 1
            }, kind: .backlog,
            seqs: { $0.seqs(of: 1) }),
        Case(
            name: "a spent budget: each device's newest, never the backlog",
            spool: {
                $0.add(device: 1, seconds: 120)
                $0.add(device: 2, seconds: 3)
            },
            planner: { planner(restriction: budget) }, kind: .stillAlive,
            seqs: { [$0.seqs(of: 1).last!, $0.seqs(of: 2).last!] }),
        Case(
            name: "a spent budget, the still-alive minimum not due: nothing",
            spool: { $0.add(device: 1, seconds: 3) },
            ledger: { ledger, spool in sendAhead(spool.stored[2], in: &ledger) },
            planner: { planner(restriction: budget) }, kind: nil, seqs: { _ in [] }),
        Case(
            name: "a spent budget: an alarm within the allowance",
            spool: { $0.add(device: 1, seconds: 3, alarmAt: 1) }, planner: { planner(restriction: budget) },
            kind: .alarms, seqs: { _ in [2] }),
        Case(
            name: "a spent budget: an alarm beyond the allowance waits; the newest goes still-alive",
            spool: { $0.add(device: 1, seconds: 3, alarmAt: 1) },
            planner: {
                let spent = AlarmAllowance()
                _ = spent.take(
                    [
                        Delivery(
                            stored: DeliveryLedgerTests.stored(99, second: 0), ackThrough: 99, stateAfter: FilterState()
                        )
                    ], perDeviceHour: 1, nowMs: nowMs)
                return planner(
                    restriction: UplinkGate.Restriction(
                        uplink: "iridium", minIntervalMs: 60_000, reason: "spent", maxAlarmsPerDeviceHour: 1),
                    allowance: spent)
            }, kind: .stillAlive, seqs: { _ in [3] }),
        Case(
            name: "nothing pending: the replay queue",
            spool: {
                $0.replays = [DeliveryLedgerTests.stored(7, second: 7), DeliveryLedgerTests.stored(8, second: 8)]
            },
            kind: .replay, seqs: { _ in [7, 8] }),
        Case(
            name: "replays the ledger settled and the spool still lists are not sent again",
            spool: {
                $0.replays = [DeliveryLedgerTests.stored(7, second: 7), DeliveryLedgerTests.stored(8, second: 8)]
            },
            ledger: { ledger, spool in replayed(spool.replays[0], in: &ledger) }, kind: .replay, seqs: { _ in [8] }),
        Case(
            name: "a backlog waits: no replay",
            spool: {
                $0.add(device: 1, seconds: 3)
                $0.replays = [DeliveryLedgerTests.stored(70, device: 2, second: 7)]
            }, kind: .backlog, seqs: { $0.seqs(of: 1) }),
        Case(
            name: "a trial of two: two devices' current positions",
            spool: { for id in 1...3 { $0.add(device: Int64(id), seconds: 60) } },
            planner: { planner(maxPositions: 2) }, kind: .current,
            seqs: { [$0.seqs(of: 1).last!, $0.seqs(of: 2).last!] }),
        Case(
            name: "devices in turn: two after device 2, wrapping round",
            spool: { for id in 1...3 { $0.add(device: Int64(id), seconds: 2) } },
            planner: { planner(devicesPerTurn: 2, turnAfter: 2) }, kind: .backlog,
            seqs: { $0.seqs(of: 3) + $0.seqs(of: 1) }),
        Case(
            name: "current positions off (a window giving way to the backlog): the backlog",
            spool: { $0.add(device: 1, seconds: 120) }, planner: { planner(currentAhead: false) }, kind: .backlog,
            seqs: { $0.seqs(of: 1) }),
    ]

    /// A trial's size is the planner's, for every transport (issue 38): one position a device,
    /// a pipelined backlog's first request each with the rest of its batch behind it once taken,
    /// or one batch across devices; a round of current positions is one a device whatever the transport.
    @Test func aTrialsSizeIsThePlanners() throws {
        let source = TableSource()
        source.add(device: 1, seconds: 3)
        source.add(device: 2, seconds: 3, from: 100)
        var planner = Self.planner(maxPositions: 100)
        let ledger = DeliveryLedger(destination: "traccar")
        func plan(_ trial: RoundPlanner.Trial?) throws -> RoundPlanner.Plan {
            planner.trial = trial
            return try planner.plan(ledger: ledger, source: source)
        }
        let full = try plan(nil)
        #expect(full.kind == .backlog && full.sendLimit == 100 && full.unproven == nil)
        #expect(try plan(.perDevice).sendLimit == 2, "one position for each of the two devices")
        let pipelined = try plan(.perDeviceFirstRequest)
        #expect(pipelined.sendLimit == 100 && pipelined.unproven == 1, "each device's first request, then its batch")
        #expect(try plan(.oneBatch).sendLimit == RoundPlanner.trialPositions)
        source.add(device: 3, seconds: 120, from: 200)
        let current = try plan(.perDeviceFirstRequest)
        #expect(current.kind == .current && current.sendLimit == 3 && current.unproven == nil)
    }

    @Test(arguments: cases)
    func aRoundSends(_ c: Case) throws {
        let source = TableSource()
        c.spool(source)
        var ledger = DeliveryLedger(destination: "traccar")
        c.ledger(&ledger, source)
        let plan = try c.planner().plan(ledger: ledger, source: source)
        #expect(plan.kind == c.kind)
        #expect(plan.deliveries.map(\.stored.seq) == c.seqs(source))
    }

    /// Current positions due, and each behind device's newest at the server already (it went ahead
    /// before a restart): the backlog goes, and the plan says the give-way is done.
    @Test func aCurrentPositionAtTheServerAlreadyIsAGiveWayDone() throws {
        let source = TableSource()
        source.add(device: 1, seconds: 120)
        var ledger = DeliveryLedger(destination: "traccar")
        Self.sendAhead(source.stored[119], in: &ledger)
        let due = try Self.planner(currentAhead: true).plan(ledger: ledger, source: source)
        #expect(due.kind == .backlog && due.currentAtServer)
        let notDue = try Self.planner(currentAhead: false).plan(ledger: ledger, source: source)
        #expect(notDue.kind == .backlog && !notDue.currentAtServer, "history first: no give-way asked for")
        source.add(device: 2, seconds: 120, from: 200)
        let other = try Self.planner(currentAhead: true).plan(ledger: ledger, source: source)
        #expect(other.kind == .current && !other.currentAtServer, "another device's newest still goes ahead")
    }

    /// The history after a current position went ahead is marked as history for Traccar, and the
    /// round says it is a backfill (a live fix ends it).
    @Test func theHistoryBehindACurrentPositionIsArchived() throws {
        let source = TableSource()
        source.add(device: 1, seconds: 120)
        var ledger = DeliveryLedger(destination: "traccar")
        Self.sendAhead(source.stored[119], in: &ledger)
        let plan = try Self.planner().plan(ledger: ledger, source: source)
        #expect(plan.kind == .backlog && plan.backfilling)
        #expect(
            plan.deliveries.allSatisfy { $0.stored.position.attributes.contains(Attribute("archive", .bool(true))) })
    }

    /// A filter that skips the first positions settles them in the plan, and the ledger it returns
    /// has them: the next round does not see them again whatever the spool has committed.
    /// Real time: what was just committed goes once, per device in order; under a spent budget
    /// only alarms and the newest when its still-alive minimum is due, the minimum counted from
    /// what was tried before.
    @Test func realTimeTriesEachPositionOnceAndAlarmsAndStillAliveUnderABudget() {
        let table = TableSource()
        table.add(device: 1, seconds: 3)
        table.add(device: 2, seconds: 3, alarmAt: 1)
        var ledger = DeliveryLedger(destination: "traccar")
        let free = RoundPlanner.realTime(
            table.stored, ledger: &ledger, filter: DeliveryLedgerTests.everything, restriction: nil)
        #expect(free.batches.map { $0.deliveries.map(\.stored.seq) } == [[1, 2, 3], [4, 5, 6]])
        #expect(free.attempted == 6)

        var spent = DeliveryLedger(destination: "traccar")
        let first = RoundPlanner.realTime(
            table.stored, ledger: &spent, filter: DeliveryLedgerTests.everything, restriction: Self.budget)
        #expect(first.batches.map { $0.deliveries.map(\.stored.seq) } == [[3], [5, 6]], "alarms, and each newest")
        // Ten seconds on: the 60 s minimum is not due again; the alarm still goes.
        table.add(device: 1, seconds: 1, from: 13)
        table.add(device: 2, seconds: 2, from: 13, alarmAt: 0)
        let second = RoundPlanner.realTime(
            Array(table.stored.dropFirst(6)), ledger: &spent, filter: DeliveryLedgerTests.everything,
            restriction: Self.budget)
        #expect(second.batches.map { $0.deliveries.map(\.stored.position.alarm) } == [["sos"]])
        #expect(second.attempted == 1)
    }

    @Test func positionsTheFilterSkipsAreSettledInThePlan() throws {
        let source = TableSource()
        source.add(device: 1, seconds: 3)
        // The default filter (75 m or 300 s): the first went, the two a second after it in the same place do not.
        var planner = Self.planner()
        planner.filter = LocationFilter(settings: FilterSettings())
        let (_, state) = planner.filter.evaluate(source.stored[0].position, state: FilterState())
        var ledger = DeliveryLedger(destination: "traccar")
        var update = DeliveryUpdate(destination: "traccar")
        ledger.delivered(Delivery(stored: source.stored[0], ackThrough: 1, stateAfter: state), into: &update)
        let plan = try planner.plan(ledger: ledger, source: source)
        #expect(plan.kind == nil && plan.deliveries.isEmpty)
        #expect(plan.settled.acknowledged.map(\.seq) == [3], "the skipped positions settled")
        #expect(plan.ledger.pending(try source.pendingDevices(destination: "traccar")[0]) == nil)
    }

    // MARK: - Ledger states, as answers leave them

    static func sendAhead(_ stored: StoredPosition, in ledger: inout DeliveryLedger) {
        var update = DeliveryUpdate(destination: "traccar")
        ledger.delivered(
            Delivery(stored: stored, ackThrough: stored.seq, stateAfter: FilterState(), kind: .ahead), into: &update)
    }

    static func acknowledge(_ stored: StoredPosition, in ledger: inout DeliveryLedger) {
        var update = DeliveryUpdate(destination: "traccar")
        ledger.delivered(Delivery(stored: stored, ackThrough: stored.seq, stateAfter: FilterState()), into: &update)
    }

    static func park(_ stored: StoredPosition, in ledger: inout DeliveryLedger) {
        var update = DeliveryUpdate(destination: "traccar")
        ledger.nowMs = nowMs
        ledger.park(
            Delivery(stored: stored, ackThrough: stored.seq, stateAfter: FilterState()), seconds: 600,
            reason: "unknown", logger: .disabled, into: &update)
    }

    static func replayed(_ stored: StoredPosition, in ledger: inout DeliveryLedger) {
        var update = DeliveryUpdate(destination: "traccar")
        ledger.delivered(.replay(stored), into: &update)
    }
}

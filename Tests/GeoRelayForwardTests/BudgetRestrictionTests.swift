import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// A destination over an uplink whose budget is spent (`UplinkGate`): alarms and, per device, a
/// still-alive position per minimum interval go ahead of the backlog; nothing is settled; once the
/// restriction lifts the backlog goes whole, once each, as history.
@Suite(.offThePool) struct BudgetRestrictionTests {
    static let restriction = UplinkGate.Restriction(
        uplink: "iridium", minIntervalMs: 600_000, reason: "iridium's day budget is spent")

    /// The answers spend the allowance: the answer that spends it restricts every destination on
    /// the uplink at once and wakes the forwarders, without waiting for the monitor's next look.
    @Test func theAnswerThatSpendsTheAllowanceRestrictsAtOnce() async {
        let gate = UplinkGate()
        let woken = WakeSignal()
        gate.watch(woken)
        let allowance = UplinkGate.Allowance(uplink: "iridium", bytesLeft: 1_000, whenSpent: Self.restriction)
        gate.set([:], allowances: ["traccar": allowance, "push": allowance])
        woken.clear()
        gate.spend(600, destination: "traccar")
        gate.spend(10_000, destination: "elsewhere")
        #expect(gate.restriction(for: "traccar") == nil && gate.restriction(for: "push") == nil, "400 bytes left")
        gate.spend(400, destination: "push")
        #expect(gate.restriction(for: "traccar") == Self.restriction)
        #expect(gate.restriction(for: "push") == Self.restriction)
        await woken.wait(timeout: .seconds(10))
        // The monitor's next look, from its totals, says the same: no change, no second wake.
        gate.set(["traccar": Self.restriction, "push": Self.restriction])
        #expect(gate.restriction(for: "traccar") == Self.restriction)
    }

    /// With uplinks configured, nothing goes before the monitor's first look says what budgets
    /// are left (a forwarder starting with a backlog sent a whole round the budget did not have);
    /// without them, nothing waits.
    @Test func forwardersWaitForTheMonitorsFirstLook() async {
        let none = UplinkGate()
        await none.firstLook(timeout: .seconds(30), clock: SystemClock())
        let gate = UplinkGate(awaitsFirstLook: true)
        let waited = Task {
            await gate.firstLook(timeout: .seconds(30), clock: SystemClock())
            return true
        }
        gate.set(
            [:],
            allowances: ["traccar": UplinkGate.Allowance(uplink: "iridium", bytesLeft: 1, whenSpent: Self.restriction)])
        #expect(await waited.value)
        #expect(gate.bytesLeft(for: "traccar") == 1, "the allowance is known when the wait ends")
        await gate.firstLook(timeout: .seconds(30), clock: SystemClock())
    }

    static let seeds = SimulationSeed.all(2)

    /// Under a budget's remainder (not spent), a backfill with live fixes arriving faster than
    /// its rounds (a fix of each device every half second; a round on the geostationary link takes
    /// at least two 600 ms round trips): each round sends the devices' newest ahead, and the
    /// history still gets what is left of the round, so it drains (a round of current positions
    /// alone at every turn starved it).
    @Test(arguments: seeds)
    func aBackfillUnderABudgetsRemainderDrainsWhileLiveFixesArrive(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 2)
        let run = "BudgetRestrictionTests/aBackfillUnderABudgetsRemainderDrainsWhileLiveFixesArrive"
        let gate = UplinkGate()
        let allowance = UplinkGate.Allowance(uplink: "vsat", bytesLeft: 50_000_000, whenSpent: Self.restriction)
        gate.set([:], allowances: [f.settings.name: allowance])
        let devices = ["a", "b", "c"]
        _ = await f.spool.append(devices.flatMap { track($0, count: 300) })
        let history = devices.flatMap { device in track(device, count: 300).map { "\(device) \($0.timeMs)" } }
        try await f.withForwarder(gate: gate) {
            var drained = false
            // Ten minutes of simulated time at most.
            for step in 0..<1_200 where !drained {
                _ = await f.spool.append(devices.map { track($0, count: 1, from: 300 + step)[0] })
                drained = try await f.world.run(for: .milliseconds(500)) {
                    Set(f.traccar.positions.map { "\($0.uniqueId) \($0.fixTimeMs)" }).isSuperset(of: history)
                }
            }
            #expect(drained, "the history drained while live fixes kept arriving, \(f.replay(run))")
        }
        for device in devices { #expect(f.traccar.orderProblem(device) == nil, "\(f.replay(run))") }
    }

    /// Both engines: one request at a time (libcurl) and pipelined.
    @Test(arguments: [1, 32])
    func aSpentBudgetCarriesAlarmsAndAStillAlivePositionUntilItLifts(pipeline: Int) async throws {
        let f = try await ForwardFixture(concurrency: 2, pipeline: pipeline)
        let gate = UplinkGate()
        gate.set([f.settings.name: Self.restriction])
        // 20 minutes of a (an alarm at 500 s) and 10 of b, all waiting.
        var a = track("a", count: 1200)
        a[500].alarm = "sos"
        let b = track("b", count: 600)
        _ = await f.spool.append(a + b)
        // One second after the newest sent: not due. Ten minutes after it: due.
        let notDue = track("a", count: 1, from: 1200)
        let due = track("a", count: 1, from: 1800)
        let total = a.count + b.count + 2
        try await f.withForwarder(gate: gate) {
            // The alarm, and each device's newest: nothing else is due.
            #expect(await f.server.waitUntil { $0.count >= 3 }, "the alarm and both devices' newest positions")
            let deferred = try await f.waitForStatus { $0.state == "deferred" }
            #expect(deferred.state == "deferred")
            #expect(deferred.lastError == Self.restriction.reason)
            // Had the one not due gone, it would have arrived before the due one.
            _ = await f.spool.append(notDue)
            _ = await f.spool.append(due)
            #expect(await f.server.waitUntil { $0.count >= 4 }, "the still-alive position ten minutes on")
            let restricted = f.server.positions
            #expect(restricted.count == 4)
            #expect(
                restricted.filter { $0.uniqueId == "a" }.map(\.fixTimeMs).sorted() == [
                    a[500].timeMs, a[1199].timeMs, due[0].timeMs,
                ])
            #expect(restricted.filter { $0.uniqueId == "b" }.map(\.fixTimeMs) == [b[599].timeMs])
            // Nothing was settled: every position is still owed.
            let owed = try await f.waitForStatus { $0.pending == total }
            #expect(owed.pending == total)

            gate.set([:])
            #expect(
                await f.server.waitWhileArriving { $0.count >= total },
                "the backlog once the budget is free")
            let online = try await f.waitForStatus { $0.pending == 0 && $0.state == "online" }
            #expect(online.state == "online")
            #expect(online.pending == 0)
        }
        let received = f.server.positions
        #expect(received.count == total, "every position once: \(received.count) of \(total)")
        for (device, track) in [("a", a + notDue + due), ("b", b)] {
            let got = received.filter { $0.uniqueId == device }
            #expect(Set(got.map(\.fixTimeMs)) == Set(track.map(\.timeMs)), "\(device): each fix once")
            // After the still-alive ones, the backlog follows in order, as history.
            let backlog = Array(got.dropFirst(device == "a" ? 3 : 1))
            #expect(backlog.map(\.fixTimeMs) == backlog.map(\.fixTimeMs).sorted(), "\(device): the backlog in order")
            #expect(
                backlog.allSatisfy { $0.attributes["archive"] == .bool(true) }, "\(device): the backlog goes as history"
            )
        }
    }

    /// A budget spent in the middle of a backlog's round on the geostationary link: the round
    /// ends, the newest goes as the still-alive position, and the rest waits, settled nowhere.
    @Test(arguments: seeds)
    func aBudgetSpentMidBacklogEndsTheRoundAndHoldsTheRest(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 1, pipeline: 32)
        let run = "BudgetRestrictionTests/aBudgetSpentMidBacklogEndsTheRoundAndHoldsTheRest"
        let gate = UplinkGate()
        let backlog = track("a", count: 2_000)
        let newest = backlog.last!.timeMs
        _ = await f.spool.append(backlog)
        try await f.withForwarder(gate: gate) {
            let started = try await f.world.run(for: .seconds(120)) { f.traccar.positions.count >= 100 }
            #expect(started, "the backlog starting, \(f.replay(run))")
            gate.set([f.settings.name: Self.restriction])
            _ = try await f.waitForStatus { $0.state == "deferred" }
            // Backlog positions sent before the round ended (the still-alive one may be there already).
            let held = f.traccar.positions.filter { $0.fixTimeMs != newest }.count
            #expect(
                held < backlog.count,
                "the round ended when the budget was spent (\(held) of \(backlog.count) sent), \(f.replay(run))")
            // The newest goes as the still-alive position; the rest waits.
            let alive = try await f.world.run(for: .seconds(120)) {
                f.traccar.positions.contains { $0.fixTimeMs == newest }
            }
            #expect(alive, "the newest position, \(f.replay(run))")
            let status = try await f.waitForStatus { $0.pending == backlog.count - held }
            #expect(
                status.pending == backlog.count - held,
                "nothing settled under the restriction: \(status.pending) pending, \(held) sent before, \(f.traccar.positions.count) now, \(f.replay(run))"
            )
        }
    }

    /// Once the budget is free, the backlog is a backfill: history behind a newer fix. A live
    /// position arriving during it goes ahead of what is left, at the next give-way (at least
    /// 2 s into the backfill: `DrainOrder.liveEdge`); the geostationary link drains a few hundred
    /// positions in that time, well under half the backlog.
    @Test(arguments: seeds)
    func liveGoesAheadOfTheBackfill(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 1, pipeline: 32) {
            $0.order = .currentFirst
        }
        let run = "BudgetRestrictionTests/liveGoesAheadOfTheBackfill"
        let gate = UplinkGate()
        gate.set([f.settings.name: Self.restriction])
        let backlog = track("a", count: 3_000)
        _ = await f.spool.append(backlog)
        let live = track("a", count: 1, from: 3_100)[0]
        try await f.withForwarder(gate: gate) {
            let alive = try await f.world.run(for: .seconds(120)) { f.traccar.positions.count >= 1 }
            #expect(alive, "the still-alive position, \(f.replay(run))")
            gate.set([:])
            let underWay = try await f.world.run(for: .seconds(120)) { f.traccar.positions.count >= 51 }
            #expect(underWay, "the backfill under way, \(f.replay(run))")
            _ = await f.spool.append([live])
            let all = try await f.world.run(for: .seconds(600)) { f.traccar.positions.count >= backlog.count + 1 }
            #expect(all, "the backfill, \(f.replay(run))")
            _ = try await f.waitForStatus { $0.pending == 0 }
        }
        let received = f.traccar.positions
        #expect(received.count == backlog.count + 1, "each once: \(received.count), \(f.replay(run))")
        #expect(received.first?.fixTimeMs == backlog.last?.timeMs, "the still-alive position first")
        let at = try #require(received.firstIndex { $0.fixTimeMs == live.timeMs })
        #expect(
            at > 50 && at < backlog.count / 2,
            "the live position went ahead of the rest of the backfill (at \(at) of \(received.count)), \(f.replay(run))"
        )
        let history = received.dropFirst().filter { $0.fixTimeMs != live.timeMs }
        #expect(history.map(\.fixTimeMs) == backlog.dropLast().map(\.timeMs), "the backfill oldest first, once each")
        #expect(history.allSatisfy { $0.attributes["archive"] == .bool(true) })
        #expect(received[at].attributes["archive"] == nil, "the live position is not history")
    }

    @Test func aPushDestinationCarriesAlarmsAndAStillAlivePositionUntilItLifts() async throws {
        let f = try await PushFixture()
        let gate = UplinkGate()
        gate.set([f.settings.name: Self.restriction])
        let bow = movingTrack("bow", count: 900, alarmAt: 100)
        let stern = movingTrack("stern", count: 300)
        _ = await f.spool.append(bow + stern)
        try await f.withForwarder(gate: gate) {
            #expect(await f.server.waitUntil { $0.count >= 3 }, "the alarm and each device's newest")
            _ = try await f.waitForStatus { $0.state == "deferred" }
            let due = movingTrack("bow", count: 1, from: 1600)
            _ = await f.spool.append(movingTrack("bow", count: 1, from: 900) + due)
            #expect(await f.server.waitUntil { $0.count >= 4 }, "the still-alive position ten minutes on")
            let restricted = f.server.points.map { "\($0.trackerId) \($0.timestamp)" }
            let stamp = { (p: Position) in Timestamp.iso8601(milliseconds: p.timeMs) }
            #expect(restricted.count == 4)
            #expect(
                Set(restricted) == [
                    "bow@alice \(stamp(bow[100]))", "bow@alice \(stamp(bow[899]))", "stern@alice \(stamp(stern[299]))",
                    "bow@alice \(stamp(due[0]))",
                ])
            gate.set([:])
            let total = bow.count + stern.count + 2
            #expect(
                await f.server.waitWhileArriving { $0.count >= total },
                "the backlog once the budget is free")
            let online = try await f.waitForStatus { $0.pending == 0 && $0.state == "online" }
            #expect(online.pending == 0)
            #expect(f.server.points.count == total, "every position once")
        }
    }
}

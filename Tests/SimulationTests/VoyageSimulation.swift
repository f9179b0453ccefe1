import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit

@testable import GeoRelayForward

/// The relay's core through a voyage on simulated time (issue 37 §2): the real spool (SQLite in
/// WAL mode, on a file, with its retention, quota and held state), the real destination loop,
/// planner, ledger, drain order, backoff and probes of a Traccar destination, all on one
/// `SimulatedClock`; the collectors, the uplink and the server simulated, from one seed.
///
/// Time moves a step at a time (`stepMinutes`, 30 by default): the clock jumps to the step's end, waking every
/// timer it passed, and the fixes the units took during the step reach the spool then, as from a
/// collector that sends in bursts. After each jump the simulation waits for the relay to be
/// quiescent (every part asleep on the clock, nothing more arriving at the server) before the next.
/// Outages begin and end on step boundaries; timers within a step fire at its end, so this
/// checks what the relay keeps and in what order it delivers, not how soon.
struct VoyageSimulation {
    struct Report: CustomStringConvertible {
        var seed: UInt64
        var days: Int
        var stored = 0
        var delivered = 0
        var outages = 0
        var outageHours = 0.0
        var largestSpoolBytes: Int64 = 0
        var largestSpoolRows = 0
        /// The most a day's traffic came to on the budgeted uplink until its budget was spent, and
        /// what the still-alive positions carried after that.
        var largestDayBytes: Int64 = 0
        var largestStillAliveBytes: Int64 = 0
        var rounds = 0
        var restarts = 0
        var clockSteps = 0
        /// Fixes the server got more than once (at least once allows them after a restart).
        var duplicates = 0
        /// What broke an invariant, with the day it was found; empty when all held.
        var problems: [String] = []
        var seconds = 0.0

        var description: String {
            "seed \(seed): \(days) days, \(stored) fixes stored, \(delivered) delivered in \(rounds) rounds "
                + "(\(duplicates) twice), \(outages) outages (\(Int(outageHours)) h down), \(restarts) restarts, \(clockSteps) clock steps; "
                + "at most \(largestDayBytes / 1000) kB a day (budget \(DayBudget.bytes / 1000) kB) "
                + "and \(largestStillAliveBytes / 1000) kB still-alive; "
                + "spool at most \(largestSpoolRows) rows, "
                + "\(largestSpoolBytes / 1024) KiB; \(String(format: "%.1f", seconds)) s"
                + (problems.isEmpty ? "" : "; PROBLEMS: " + problems.prefix(5).joined(separator: "; "))
        }
    }

    var days: Int
    var seed: UInt64
    /// How far the clock jumps at a time: the run's time is about proportional to the steps.
    var stepMinutes: Int64 = 30

    func run() async throws -> Report {
        let started = ContinuousClock.now
        let voyage = Voyage(days: days, seed: seed)
        var report = Report(seed: seed, days: days)
        report.outages = voyage.outages.count
        report.outageHours = voyage.outages.reduce(0) { $0 + Double($1.untilMs - $1.fromMs) / 3_600_000 }
        report.restarts = voyage.restarts.count
        report.clockSteps = voyage.clockSteps.count
        // In memory where the system has it: a voyage's thousands of commits each sync the file,
        // which on a disk would be most of the run (the syncs' cost is the power-cut suite's business).
        let directory = try TemporaryDirectory(under: access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")
        let clock = SimulatedClock(wallMs: Voyage.startMs)
        var spoolSettings = Spool.Settings(Configuration.SpoolSettings())
        spoolSettings.path = directory.file("spool.db")
        spoolSettings.clock = clock
        let server = SimulatedServer()
        let gate = UplinkGate()
        let budget = DayBudget(gate: gate)
        var relay = try await SimulatedRelay.start(spool: spoolSettings, server: server, gate: gate)
        var stored: [String: [Int64]] = [:]
        try await relay.settle("the relay's start")

        let stepMs = stepMinutes * 60_000
        var nowMs = Voyage.startMs
        let endMs = Voyage.startMs + Int64(days) * Voyage.dayMs
        var restarts = voyage.restarts[...]
        var clockSteps = voyage.clockSteps[...]
        while nowMs < endMs {
            let next = min(endMs, nowMs + stepMs)
            server.up = voyage.linkUp(atMs: nowMs)
            clock.advance(by: .milliseconds(next - nowMs))
            // The uplink monitor's look: what the budget has left today, from the spool's tally.
            if (next - Voyage.startMs) % Voyage.dayMs == 0 {
                // Midnight (UTC, the budget's day and the spool's): the day just ended, then a new budget.
                let day = Int((next - Voyage.startMs) / Voyage.dayMs)
                // The interface's count (what the provider bills), and what went once the budget was
                // spent: alarms and still-alive positions, by design.
                let (spent, stillAlive) = server.takeDayBytes()
                report.largestDayBytes = max(report.largestDayBytes, spent - stillAlive)
                report.largestStillAliveBytes = max(report.largestStillAliveBytes, stillAlive)
                if spent - stillAlive > DayBudget.bytes + DayBudget.bytes / 50 {
                    report.problems.append(
                        "day \(day): \(spent - stillAlive) B on the uplink before its budget of \(DayBudget.bytes) B was spent, over it by more than 2 %"
                    )
                }
                budget.look(recorded: relay.spool.wireBytesRecorded()["traccar"] ?? 0)
                budget.newDay()
            } else {
                budget.look(recorded: relay.spool.wireBytesRecorded()["traccar"] ?? 0)
            }
            try await relay.settle("the timers up to \(next)")
            let fixes = voyage.fixes(fromMs: nowMs, untilMs: next)
            for (position, result) in zip(fixes, await relay.spool.append(fixes)) {
                if case .stored = result { stored[position.device, default: []].append(position.timeMs) }
            }
            try await relay.settle("the fixes up to \(next)")
            nowMs = next
            // The relay stops and starts again (an update, a reboot): the spool reopened from its
            // file, the destination's memory rebuilt from it.
            while let step = clockSteps.first, step.atMs <= nowMs {
                clockSteps = clockSteps.dropFirst()
                clock.stepWall(byMs: step.byMs)
            }
            while let restart = restarts.first, restart <= nowMs {
                restarts = restarts.dropFirst()
                await relay.stop()
                budget.look(recorded: relay.spool.wireBytesRecorded()["traccar"] ?? 0)
                budget.spoolReopened()
                relay = try await SimulatedRelay.start(spool: spoolSettings, server: server, gate: gate)
                try await relay.settle("the restart at \(restart)")
            }
            if (nowMs - Voyage.startMs) % Voyage.dayMs == 0 {
                let day = Int((nowMs - Voyage.startMs) / Voyage.dayMs)
                let status = try relay.reader.status()
                report.largestSpoolRows = max(report.largestSpoolRows, status.rows)
                report.largestSpoolBytes = max(report.largestSpoolBytes, status.usedBytes)
                if status.usedBytes > spoolSettings.maxBytes {
                    report.problems.append("day \(day): the spool holds \(status.usedBytes) B, over its quota")
                }
                // Retention: nothing delivered is kept much past `retainHours`, so the rows stay
                // within what the retention and the outages' backlog hold (a day is 6,600 fixes at most).
                let retainedDays = Int(spoolSettings.retainHours / 24) + 1
                if status.rows > (retainedDays + 3) * 6_700 {
                    report.problems.append("day \(day): the spool holds \(status.rows) rows, past its retention")
                }
            }
        }
        // The voyage is over: the link comes back and stays, the budget with it; everything stored must arrive.
        server.up = true
        gate.set([:])
        for _ in 0..<200 {
            let pending = try relay.reader.status().destinations.first?.pending ?? 0
            if pending == 0 { break }
            clock.advance(by: .seconds(60))
            try await relay.settle("the final drain")
        }
        // At least once: a restart may send again what was in flight; the order is judged on each
        // fix's first arrival, as Traccar's handlers see a repeat as nothing new.
        for (device, times) in stored {
            var seen = Set<Int64>()
            let arrivals = server.arrivals[device] ?? []
            let first = arrivals.filter { seen.insert($0).inserted }
            report.duplicates += arrivals.count - first.count
            if let problem = DeliveryOrder.problem(first, expected: times) {
                report.problems.append("at the end: \(device): \(problem)")
            }
        }
        report.stored = stored.values.reduce(0) { $0 + $1.count }
        report.delivered = server.positions
        report.rounds = server.rounds
        await relay.stop()
        report.seconds = (ContinuousClock.now - started) / .seconds(1)
        return report
    }
}

/// The relay's core as the daemon wires it, on the simulation's clock: the spool with its upkeep
/// and one Traccar destination whose engine and probe reach the simulated server.
struct SimulatedRelay {
    let spool: Spool
    let reader: SpoolReader
    let forwarder: TraccarForwarder
    let delivering: Task<Void, Never>
    let upkeep: Task<Void, Never>
    let quiescence: Quiescence

    static func start(spool settings: Spool.Settings, server: SimulatedServer, gate: UplinkGate) async throws
        -> SimulatedRelay
    {
        guard let clock = settings.clock as? SimulatedClock else { throw SimulationError("not a simulated clock") }
        let spool = try Spool(settings: settings)
        var destination = Configuration.DestinationSettings()
        destination.name = "traccar"
        destination.url = "http://traccar.invalid:5055"
        destination.filter.mode = .all
        destination.probeConnectSeconds = 0
        try await spool.register(destinations: [DestinationRegistration(name: destination.name, buffered: true)])
        let probe: DestinationLink.Probe = { _ in (server.probe(), 0) }
        let forwarder = try TraccarForwarder(
            settings: destination, spool: spool, logger: .disabled, gate: gate, clock: clock,
            probeMeter: WireMeter(), probe: probe
        ) { meter, logger in
            SimulatedEngine(
                server: server, destination: destination.name, parkSeconds: destination.parkSeconds, logger: logger,
                meter: meter, restricted: { [name = destination.name] in gate.restriction(for: name) != nil })
        }
        return SimulatedRelay(
            spool: spool, reader: try spool.makeReader(), forwarder: forwarder,
            delivering: Task { await forwarder.run() },
            // Retention, the quota's idle check and the log's trim, as the daemon's upkeep part runs them.
            upkeep: Task { await spool.runUpkeep() },
            quiescence: Quiescence(clock: clock, spool: spool, server: server))
    }

    func settle(_ what: String) async throws {
        try await quiescence.settle(what)
    }

    /// Stops as the daemon does: the destination finishes what is in flight, the upkeep ends,
    /// the spool closes.
    func stop() async {
        forwarder.finish()
        await delivering.value
        upkeep.cancel()
        await upkeep.value
        spool.close()
    }
}

/// Whether the relay has done what the last move of the clock or the last fixes asked of it:
/// every part asleep on the clock again (as many as when it was idle, or more), and neither the
/// number asleep nor the server's rounds changing over a few polls. A bound on the condition,
/// never an assumed rate: it fails, naming what it waited for, after ten seconds or more. A relay
/// still busy when it looked quiet only moves on a step later: what is checked (what it keeps, in
/// what order it delivers) does not depend on it.
struct Quiescence {
    let clock: SimulatedClock
    let spool: Spool
    let server: SimulatedServer

    func settle(_ what: String) async throws {
        var last: (sleeping: Int, rounds: Int)?
        var steady = 0
        for _ in 0..<50_000 {
            await spool.flush()
            let now = (sleeping: clock.sleeping, rounds: server.rounds)
            if let last, last == now, now.sleeping > 0 {
                steady += 1
                if steady >= 3 { return }
            } else {
                steady = 0
            }
            last = now
            try await Task.sleep(for: .microseconds(200))
        }
        throw SimulationError("the relay was not quiescent after \(what) within 10 s")
    }
}

struct SimulationError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The uplink's day budget as the monitor applies it (`UplinkMonitor`): at each look, what is left
/// of today's budget after the wire bytes the spool recorded since the last look (counted as they
/// are recorded, not once committed); spent, the destination is restricted to alarms and a
/// still-alive position per device every 15 minutes. The gate itself (and the forwarder's
/// spending of it between looks) is the relay's own.
final class DayBudget {
    /// About 6,000 positions a day: less than a passage's 6,600 fixes and an outage's backlog.
    static let bytes: Int64 = 1_200_000
    static let restriction = UplinkGate.Restriction(
        uplink: "satellite", minIntervalMs: 900_000, reason: "the satellite's day budget is spent")

    private let gate: UplinkGate
    private var spentToday: Int64 = 0
    /// The spool's count of recorded wire bytes at the last look (it starts at 0 when it opens).
    private var lastRecorded: Int64 = 0

    init(gate: UplinkGate) {
        self.gate = gate
        apply()
    }

    func look(recorded: Int64) {
        spentToday += max(0, recorded - lastRecorded)
        lastRecorded = recorded
        apply()
    }

    /// The relay restarted: its spool counts from 0 again.
    func spoolReopened() {
        lastRecorded = 0
    }

    /// UTC midnight: a new budget begins.
    func newDay() {
        spentToday = 0
        apply()
    }

    private func apply() {
        let left = Self.bytes - spentToday
        gate.set(
            left > 0 ? [:] : ["traccar": Self.restriction],
            allowances: [
                "traccar": UplinkGate.Allowance(
                    uplink: "satellite", bytesLeft: max(0, left), whenSpent: Self.restriction)
            ])
    }
}

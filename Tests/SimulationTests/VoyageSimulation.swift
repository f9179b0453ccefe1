import Foundation
import GeoRelayCore
import GeoRelayService
import GeoRelaySpool
import GeoRelayTestKit

@testable import GeoRelayForward

/// The relay's core through a voyage on simulated time (issue 37 §2): the real spool (SQLite in
/// WAL mode, on a file, with its retention, quota, held state and diagnostic log), the real
/// uplink monitor and gate, and the real destination loop, planner, ledger, drain order, backoff
/// and probes of a Traccar destination, all on one `SimulatedClock`; the collectors, the routes,
/// the uplinks and the server simulated, from one seed.
///
/// Time moves a step at a time (`stepMinutes`, 30 by default): the clock jumps to the step's end, waking every
/// timer it passed, and the fixes the units took during the step reach the spool then, as from a
/// collector that sends in bursts. After each jump the simulation waits for the relay to be
/// quiescent (every part asleep on the clock, nothing more arriving at the server) before the next.
/// Outages begin and end on step boundaries; timers within a step fire at its end, so this
/// checks what the relay keeps, in what order it delivers and what it spends, not how soon
/// (within a step).
struct VoyageSimulation {
    var days: Int
    var seed: UInt64
    /// How far the clock jumps at a time: the run's time is about proportional to the steps.
    var stepMinutes: Int64 = 30
    /// Whether it has the process to itself (`make simulate`): memory is judged only then.
    var alone = false

    func run() async throws -> VoyageReport {
        let started = ContinuousClock.now
        let voyage = Voyage(days: days, seed: seed)
        var report = VoyageReport(seed: seed, days: days, voyage: voyage)
        report.alone = alone
        // In memory where the system has it: a voyage's thousands of commits each sync the file,
        // which on a disk would be most of the run (the syncs' cost is the power-cut suite's business).
        let directory = try TemporaryDirectory(under: access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")
        let clock = SimulatedClock(wallMs: Voyage.startMs)
        var spoolSettings = Spool.Settings(Configuration.SpoolSettings())
        spoolSettings.path = directory.file("spool-0.db")
        spoolSettings.clock = clock
        let server = SimulatedServer()
        // The world's time, which the gateway's tokens expire on: the clock's elapsed time, not
        // its wall time, which the voyage steps.
        let origin = clock.monotonicMs()
        let gateway = try SimulatedGateway { Voyage.startMs + clock.monotonicMs() - origin }
        defer { gateway.stop() }
        let gate = UplinkGate()
        let uplinks = SimulatedUplinks(days: days)
        var relay = try await SimulatedRelay.start(
            spool: spoolSettings, server: server, gateway: gateway, gate: gate, uplinks: uplinks,
            random: RandomSource(seed: seed))
        var collectors = SimulatedCollectors(clock: clock)
        func startAgain() async throws {
            relay = try await SimulatedRelay.start(
                spool: spoolSettings, server: server, gateway: gateway, gate: gate, uplinks: uplinks,
                random: RandomSource(seed: seed &+ 1), idleSleepers: relay.quiescence.idleSleepers)
            collectors.reconnect(clock: clock)
            pushRecorded = 0
        }
        /// The push destination's bytes as its meter recorded them in this life of the relay.
        var pushRecorded: Int64 = 0
        var stored = 0
        /// Each alarm's fix time, with the step it was stored in.
        var alarmsStored: [Int64: Int] = [:]
        var linkUpInStep: [Bool] = []
        var storage = StorageWrites()
        relay.quiescence.idleSleepers = try await relay.settle("the relay's start")

        let stepMs = stepMinutes * 60_000
        var nowMs = Voyage.startMs
        let endMs = Voyage.startMs + Int64(days) * Voyage.dayMs
        var restarts = voyage.restarts[...]
        var clockSteps = voyage.clockSteps[...]
        var restores = voyage.restores[...]
        var lives = 0
        while nowMs < endMs {
            let next = min(endMs, nowMs + stepMs)
            let underway = voyage.underway(atMs: nowMs)
            server.step = linkUpInStep.count
            server.up = voyage.linkUp(atMs: nowMs)
            gateway.up = server.up
            gateway.unavailable = voyage.gatewayUnavailable(atMs: nowMs)
            server.unavailable = voyage.traccarUnavailable(atMs: nowMs)
            server.uplink = SimulatedUplinks.uplink(underway: underway)
            // Traccar can take an alarm in this step: the link up and the server out of maintenance.
            linkUpInStep.append(server.up && !server.unavailable)
            clock.advance(by: .milliseconds(next - nowMs))
            // The monitor's look (every 5 s in the daemon): the route, what is left of the budgets.
            await relay.look(underway: underway)
            try await relay.settle("the timers up to \(next)")
            // A flaky unit's garbled lines, as the ingest logs them: enough to fill the
            // diagnostic log's 10,000 rows in about ten days (in a shorter voyage, within it), so
            // its trim runs (across restarts and crashes too).
            for _ in 0..<Int(Double(20 * stepMinutes / 30) * max(1, 10 / Double(days))) {
                relay.logger.warning("unit-3: line with a bad checksum skipped")
            }
            let fixes = voyage.fixes(fromMs: nowMs, untilMs: next)
            // Expected before they are handed over: the relay may deliver them before `ok`.
            for position in fixes {
                server.expect(position.device, position.timeMs)
                gateway.expect(position.device, position.timeMs)
            }
            let answered = await collectors.send(fixes, to: relay.spool)
            let acknowledged = Set(answered.map { "\($0.device) \($0.timeMs)" })
            for position in fixes where !acknowledged.contains("\(position.device) \(position.timeMs)") {
                server.forget(position.device, position.timeMs)
                gateway.forget(position.device, position.timeMs)
            }
            stored += answered.count
            for position in answered where position.alarm != nil { alarmsStored[position.timeMs] = server.step }
            // The relay stops and starts again: cleanly at the step's end (the destination
            // finishes what is in flight, the spool closes), or in a crash just after the step's
            // fixes were answered, while it delivers them (the spool's files as they are on disk
            // then). Either way the next life reopens the spool from its file and rebuilds the
            // destination's memory and the monitor's totals from it.
            if let restart = restarts.first, restart.atMs <= next, restart.crash {
                restarts = restarts.dropFirst()
                lives += 1
                let path = directory.file("spool-\(lives).db")
                try await relay.crash(copyingTo: path)
                for suffix in ["", "-wal", "-shm"] {
                    try? FileManager.default.removeItem(atPath: spoolSettings.path + suffix)
                }
                spoolSettings.path = path
                try await startAgain()
            }
            try await relay.settle("the fixes up to \(next)")
            // What push spent, by its own meter (the gateway's side has no interface count).
            let recorded = relay.spool.wireBytesRecorded()["push"] ?? 0
            server.carried(
                bytes: recorded - pushRecorded, uplink: server.uplink,
                day: UplinkMonitor.day(clock.nowMs()), restricted: gate.restriction(for: "push") != nil, push: true)
            pushRecorded = recorded
            await relay.look(underway: underway)
            nowMs = next
            while let step = clockSteps.first, step.atMs <= nowMs {
                clockSteps = clockSteps.dropFirst()
                clock.stepWall(byMs: step.byMs)
            }
            while let restore = restores.first, restore.atMs <= nowMs {
                restores = restores.dropFirst()
                report.replayed += try await restoreTraccar(since: nowMs - restore.backMs, until: nowMs, relay: relay)
                report.restores += 1
            }
            while let restart = restarts.first, restart.atMs <= nowMs {
                restarts = restarts.dropFirst()
                await relay.stop()
                try await startAgain()
                try await relay.settle("the restart at \(restart.atMs)")
            }
            if (nowMs - Voyage.startMs) % Voyage.dayMs == 0 {
                let day = Int((nowMs - Voyage.startMs) / Voyage.dayMs)
                try report.endOfDay(day, reader: relay.reader, settings: spoolSettings, storage: storage.take())
            }
        }
        // The voyage is over: the link comes back and stays, the budget with it; everything stored must arrive.
        server.step = linkUpInStep.count
        server.up = true
        gateway.up = true
        gateway.unavailable = false
        server.unavailable = false
        server.uplink = SimulatedUplinks.marina.name
        for _ in 0..<200 {
            await relay.look(underway: false)
            let pending = try relay.reader.status().destinations.reduce(0) { $0 + $1.pending }
            if pending == 0 { break }
            clock.advance(by: .seconds(60))
            try await relay.settle("the final drain")
        }
        report.stored = stored
        report.refusedLines = collectors.refused
        if collectors.acknowledged != stored {
            report.problems.append("\(collectors.acknowledged) lines answered ok, \(stored) positions stored")
        }
        if !collectors.refusals.isEmpty { report.refusals = collectors.refusals }
        for (device, fixes) in server.lost {
            report.problems.append(
                "\(device): \(fixes.count) fixes a restore lost never arrived again, the oldest \(Timestamp.iso8601(milliseconds: fixes.min() ?? 0))"
            )
        }
        report.check(server)
        report.check(gateway)
        report.check(alarms: alarmsStored, linkUpInStep: linkUpInStep, at: server)
        report.checkMemory()
        report.checkBudgets(server.carried[SimulatedUplinks.satelliteName] ?? [:])
        await relay.stop()
        report.seconds = (ContinuousClock.now - started) / .seconds(1)
        return report
    }
}

extension VoyageSimulation {
    /// The Traccar server is restored from a backup of `since` (fix times): what it took of
    /// the spool's positions in `since..<until` is gone. The crew runs `georelay replay
    /// --destination traccar --since …` (the command's own code, on the running relay's spool,
    /// as it does beside the daemon); every position the spool still holds in the window must
    /// then arrive again. Returns how many were queued.
    func restoreTraccar(since: Int64, until: Int64, relay: SimulatedRelay) async throws -> Int {
        var lost: [String: Set<Int64>] = [:]
        for (id, device) in try relay.reader.devices() {
            try relay.reader.forEachStoredPosition(deviceID: id, device: device, sinceMs: since, untilMs: until) {
                lost[device, default: []].insert($0.position.timeMs)
                return true
            }
        }
        relay.server.restored(losing: lost)
        var configuration = relay.uplinks.configuration
        configuration.spool.path = relay.spool.path
        let report = try await Commands.queueReplay(
            configuration: configuration, destination: "traccar",
            selection: ReplaySelection(sinceMs: since, untilMs: until))
        return report.queued
    }
}

/// The bytes this process hands to the storage layer (`/proc/self/io` `wchar`: every `write`
/// and `pwrite`, the spool's database and WAL, which are the only files the simulation writes;
/// sockets are not counted), per simulated day: what the SD card would be asked to take.
struct StorageWrites {
    private var last = Self.read()

    mutating func take() -> Int64 {
        let now = Self.read()
        defer { last = now }
        return now - last
    }

    private static func read() -> Int64 {
        guard let text = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("wchar:") {
            return Int64(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) ?? 0
        }
        return 0
    }
}

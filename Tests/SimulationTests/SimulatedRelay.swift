import Foundation
import GeoRelayCore
import GeoRelayService
import GeoRelaySpool
import GeoRelayTestKit

@testable import GeoRelayForward

/// The relay's core as the daemon wires it, on the simulation's clock: the spool with its upkeep
/// and its diagnostic log, the uplink monitor's looks (with the simulation's routes in place of
/// the kernel's), and one Traccar destination whose engine and probe reach the simulated server.
struct SimulatedRelay {
    let spool: Spool
    let reader: SpoolReader
    let forwarder: TraccarForwarder
    let monitor: UplinkMonitor
    let logger: Logger
    let delivering: Task<Void, Never>
    let upkeep: Task<Void, Never>
    let quiescence: Quiescence

    static func start(spool settings: Spool.Settings, server: SimulatedServer, gate: UplinkGate) async throws
        -> SimulatedRelay
    {
        guard let clock = settings.clock as? SimulatedClock else { throw SimulationError("not a simulated clock") }
        let spool = try Spool(settings: settings)
        // What the crew reads with `georelay logs`: the relay's notices, in the spool, trimmed by its upkeep.
        let logger = Logger(label: "relay", sinks: [SpoolLogSink(spool: spool)], minimumLevel: .info, clock: clock)
        var destination = Configuration.DestinationSettings()
        destination.name = "traccar"
        destination.url = "http://traccar.invalid:5055"
        destination.filter.mode = .all
        destination.probeConnectSeconds = 0
        try await spool.register(destinations: [DestinationRegistration(name: destination.name, buffered: true)])
        let probe: DestinationLink.Probe = { _ in (server.probe(), 0) }
        let forwarder = try TraccarForwarder(
            settings: destination, spool: spool, logger: logger, gate: gate, clock: clock,
            probeMeter: WireMeter(), probe: probe
        ) { meter, logger in
            SimulatedEngine(
                server: server, destination: destination.name, parkSeconds: destination.parkSeconds, logger: logger,
                meter: meter,
                route: { [name = destination.name] in
                    (server.uplink, UplinkMonitor.day(clock.nowMs()), gate.restriction(for: name) != nil)
                })
        }
        return SimulatedRelay(
            spool: spool, reader: try spool.makeReader(), forwarder: forwarder,
            monitor: UplinkMonitor(spool: spool, logger: logger, gate: gate) { SimulatedUplinks.configuration },
            logger: logger,
            delivering: Task { await forwarder.run() },
            // Retention, the quota's idle check and the log's trim, as the daemon's upkeep part runs them.
            upkeep: Task { await spool.runUpkeep() },
            quiescence: Quiescence(clock: clock, spool: spool, server: server))
    }

    func settle(_ what: String) async throws {
        try await quiescence.settle(what)
    }

    /// The uplink monitor's look, with the route the traffic takes now.
    func look(underway: Bool) async {
        await monitor.look(
            routes: SimulatedUplinks.routes(underway: underway), configuration: SimulatedUplinks.configuration,
            interfaces: [:])
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

    /// Dies as a power cut or SIGKILL leaves it: the spool's files as they are on disk at this
    /// instant are copied to `path` (the next life's spool); what the writer held and had not
    /// committed (delivery cursors, counters, usage, log entries) is not in them. A read
    /// transaction is held during the copy so the WAL is not reset under it: the copy is the
    /// database plus every frame a crash would find. Then this life is torn down without
    /// finishing anything, and its files are left behind.
    func crash(copyingTo path: String) async throws {
        var copyError: (any Error)?
        try reader.snapshot { (reader) throws(SpoolError) in
            _ = try reader.newestSeq()
            do {
                try FileManager.default.copyItem(atPath: spool.path, toPath: path)
                if FileManager.default.fileExists(atPath: spool.path + "-wal") {
                    try FileManager.default.copyItem(atPath: spool.path + "-wal", toPath: path + "-wal")
                }
            } catch {
                copyError = error
            }
        }
        if let copyError { throw copyError }
        forwarder.abandon()
        delivering.cancel()
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

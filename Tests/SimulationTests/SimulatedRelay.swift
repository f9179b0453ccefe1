import Foundation
import GeoRelayCore
import GeoRelayService
import GeoRelaySpool
import GeoRelayTestKit

@testable import GeoRelayForward

/// The relay's core as the daemon wires it, on the simulation's clock: the spool with its upkeep
/// and its diagnostic log, the uplink monitor's looks (with the simulation's routes in place of
/// the kernel's), a Traccar destination whose engine and probe reach the simulated server, and a
/// push destination whose real HTTP, zstd and token code reach the simulated gateway.
struct SimulatedRelay {
    let spool: Spool
    let reader: SpoolReader
    let server: SimulatedServer
    let forwarders: [any DestinationForwarder]
    let monitor: UplinkMonitor
    let uplinks: SimulatedUplinks
    let logger: Logger
    let delivering: [Task<Void, Never>]
    let upkeep: Task<Void, Never>
    var quiescence: Quiescence

    static func start(
        spool settings: Spool.Settings, server: SimulatedServer, gateway: SimulatedGateway, gate: UplinkGate,
        uplinks: SimulatedUplinks, random: RandomSource, idleSleepers: Int? = nil
    ) async throws -> SimulatedRelay {
        guard let clock = settings.clock as? SimulatedClock else { throw SimulationError("not a simulated clock") }
        let spool = try Spool(settings: settings)
        // What the crew reads with `georelay logs`: the relay's notices, in the spool, trimmed by its upkeep.
        let logger = Logger(label: "relay", sinks: [SpoolLogSink(spool: spool)], minimumLevel: .info, clock: clock)
        var destination = Configuration.DestinationSettings()
        destination.name = "traccar"
        destination.url = "http://traccar.invalid:5055"
        destination.filter.mode = .all
        destination.probeConnectSeconds = 0
        let push = pushDestination(gateway)
        try await spool.register(destinations: [
            DestinationRegistration(name: destination.name, buffered: true),
            DestinationRegistration(name: push.name, buffered: true),
        ])
        let probe: DestinationLink.Probe = { _ in (server.probe(), 0) }
        let forwarder = try TraccarForwarder(
            settings: destination, spool: spool, logger: logger, gate: gate, clock: clock,
            probeMeter: WireMeter(), probe: probe, random: random
        ) { meter, logger in
            SimulatedEngine(
                server: server, destination: destination.name, parkSeconds: destination.parkSeconds, logger: logger,
                meter: meter,
                route: { [name = destination.name] in
                    (server.uplink, UplinkMonitor.day(clock.nowMs()), gate.restriction(for: name) != nil)
                })
        }
        let pushForwarder = try PushForwarder(
            settings: push, spool: spool, logger: logger, gate: gate, clock: clock, random: random)
        let forwarders: [any DestinationForwarder] = [forwarder, pushForwarder]
        return SimulatedRelay(
            spool: spool, reader: try spool.makeReader(), server: server, forwarders: forwarders,
            monitor: UplinkMonitor(spool: spool, logger: logger, gate: gate) { uplinks.configuration },
            uplinks: uplinks,
            logger: logger,
            delivering: forwarders.map { forwarder in Task { await forwarder.run() } },
            // Retention, the quota's idle check and the log's trim, as the daemon's upkeep part runs them.
            upkeep: Task { await spool.runUpkeep() },
            quiescence: Quiescence(
                clock: clock, spool: spool, server: server, gateway: gateway,
                links: [forwarder.link, pushForwarder.link], idleSleepers: idleSleepers))
    }

    /// The push destination as `georelay`'s configuration would have it, against the gateway.
    static func pushDestination(_ gateway: SimulatedGateway) -> Configuration.DestinationSettings {
        var settings = gateway.fake.destination()
        settings.filter.mode = .all
        settings.probeConnectSeconds = 0
        return settings
    }

    @discardableResult
    func settle(_ what: String) async throws -> Int {
        try await quiescence.settle(what)
    }

    /// The uplink monitor's look, with the route the traffic takes now.
    func look(underway: Bool) async {
        await monitor.look(
            routes: uplinks.routes(underway: underway), configuration: uplinks.configuration,
            interfaces: [:])
    }

    /// Stops as the daemon does: the destination finishes what is in flight, the upkeep ends,
    /// the spool closes.
    func stop() async {
        for forwarder in forwarders { forwarder.finish() }
        for task in delivering { await task.value }
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
        for forwarder in forwarders { forwarder.abandon() }
        for task in delivering {
            task.cancel()
            await task.value
        }
        upkeep.cancel()
        await upkeep.value
        spool.close()
    }
}
/// Whether the relay has done what the last move of the clock or the last fixes asked of it:
/// no destination in a round, every part asleep on the clock again (at least as many as when it
/// was idle at its start), and neither
/// that number nor the server's rounds nor the gateway's exchanges changing over a few polls. A
/// bound on the condition, never an assumed rate: it fails, naming what it waited for, after
/// 50,000 polls (ten seconds or more).
struct Quiescence {
    let clock: SimulatedClock
    let spool: Spool
    let server: SimulatedServer
    let gateway: SimulatedGateway
    /// The destinations' links: no round under way on any.
    let links: [DestinationLink]
    /// The parts asleep on the clock when the relay is idle; nil until the first settle after its
    /// start has measured it.
    var idleSleepers: Int?

    /// Waits until quiescent; returns the parts asleep then.
    @discardableResult
    func settle(_ what: String) async throws -> Int {
        var last: (sleeping: Int, exchanges: Int)?
        var steady = 0
        // At the start nothing tells how many parts sleep when idle: a longer steadiness decides.
        let needed = idleSleepers == nil ? 50 : 3
        for _ in 0..<50_000 {
            await spool.flush()
            let now = (sleeping: clock.sleeping, exchanges: server.rounds + gateway.exchanges)
            if let last, last == now, now.sleeping >= max(1, idleSleepers ?? 1), !links.contains(where: \.roundUnderWay)
            {
                steady += 1
                if steady >= needed { return now.sleeping }
            } else {
                steady = 0
            }
            last = now
            try await Task.sleep(for: .microseconds(200))
        }
        throw SimulationError(
            "the relay was not quiescent after \(what) within 50,000 polls: \(clock.sleeping) parts asleep on the clock, \(idleSleepers ?? 0) when idle"
        )
    }
}

struct SimulationError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

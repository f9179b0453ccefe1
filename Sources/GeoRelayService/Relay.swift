import FoundationEssentials
import GeoRelayCore
import GeoRelayForward
import GeoRelayHTTP
import GeoRelayIngest
import GeoRelaySpool
import Glibc

/// The daemon: ingest, spool and one forwarder per destination, with a graceful lifecycle.
///
/// SIGTERM or SIGINT: stop intake, answer what is in flight, abandon
/// requests still running after the grace period, close the spool cleanly.
/// SIGHUP: re-read the configuration and rebuild the destinations (the
/// Traccar client's `updateConfig`); the spool's delivery state is kept. The
/// old destinations finish as at a stop (their requests in flight answered,
/// within the grace period) and what they settled is committed before the new
/// ones read the spool, so a reload sends nothing twice.
/// Under systemd's watchdog the keep-alive goes out only while the ingest loop
/// and the spool writer turn over (`Watchdog`).
package struct Relay: Sendable {
    package var configuration: Configuration
    /// Re-read on SIGHUP; nil disables reloading.
    package var configPath: String?
    /// Bound on each shutdown step.
    package var grace: Duration = .seconds(5)
    package var logLevel: LogLevel = .info
    package var extraSinks: [any LogSink] = []
    /// Where `NOTIFY_SOCKET` and `WATCHDOG_USEC` are read from.
    package var environment: [String: String] = ProcessInfo.processInfo.environment
    /// What a test injects: wedged loops, a clock discipline (`FaultInjection`).
    package var faults: FaultInjection = .none
    /// The relay's time, handed to every part it builds (the spool, ingest and the listeners, the
    /// loops' heartbeats and their monitor, the log's timestamps, the forwarders): the system's,
    /// or a test's or simulation's (issue 37).
    package var clock: any RelayClock = SystemClock()

    package init(configuration: Configuration, configPath: String?) {
        self.configuration = configuration
        self.configPath = configPath
    }

    /// Runs until SIGTERM/SIGINT (or until the task is cancelled).
    package func run() async throws {
        let signals = SignalStream([SIGTERM, SIGINT, SIGHUP])
        let stderr = StandardErrorLogSink()
        let systemd = SystemdNotifier(environment: environment)
        // The loops' waits are bounded by the watchdog's timings, so an idle loop stays young.
        let timing = HealthMonitor.Configuration(watchdogTimeout: systemd.watchdogTimeout)
        let spool: Spool
        do {
            var settings = Spool.Settings(configuration.spool)
            settings.turnInterval = timing.turnInterval
            settings.clock = clock
            spool = try Spool(
                settings: settings,
                logger: Logger(label: "spool", sinks: [stderr] + extraSinks, minimumLevel: logLevel, clock: clock))
        } catch {
            throw RelayError("cannot open the spool \(configuration.spool.path): \(error)")
        }
        let logger = Logger(
            label: "relay", sinks: [stderr, SpoolLogSink(spool: spool)] + extraSinks, minimumLevel: logLevel,
            clock: clock)

        let ingest: IngestServer
        let health: HealthMonitor
        var phones: PhoneListener?
        var sbd: DirectIPListener?
        var metrics: HTTPListener?
        var page: HTTPListener?
        let liveConfiguration = StatusPage.LiveConfiguration(configuration)
        do {
            try await spool.register(
                destinations: configuration.destinations.map {
                    DestinationRegistration(name: $0.name, buffered: $0.buffer)
                })
            try spool.setSourceDevices(configuration.sourceIDs)
            var settings = IngestServer.Settings(configuration)
            settings.turnInterval = timing.turnInterval
            settings.clock = clock
            ingest = try IngestServer(settings: settings, spool: spool, logger: logger.with(label: "ingest"))
            health = HealthMonitor(
                parts: [
                    HealthMonitor.Part(key: "ingest", heartbeat: ingest.heartbeat),
                    HealthMonitor.Part(key: "writer", heartbeat: spool.writerHeartbeat),
                ],
                configuration: timing, clock: clock)
            if let listen = configuration.metricsListen, listen != configuration.uiListen {
                metrics = try Metrics.serve(
                    listen: listen, configuration: liveConfiguration, health: health, faults: faults, clock: clock)
            }
            if let listen = configuration.uiListen {
                page = try StatusPage.serve(
                    listen: listen, configuration: liveConfiguration, health: health,
                    metrics: listen == configuration.metricsListen, faults: faults, clock: clock)
            }
            if let listen = configuration.ingest.httpListen {
                phones = try PhoneListener(
                    listen: listen, spool: spool, rules: ingest.rules,
                    requestsPerSecond: configuration.ingest.httpRequestsPerSecond,
                    logger: logger.with(label: "phones"), clock: clock)
            }
            if let listen = configuration.ingest.sbd.directIP {
                sbd = try DirectIPListener(
                    listen: listen, vessels: configuration.ingest.sbd.vessels,
                    confirm: configuration.ingest.sbd.confirm,
                    spool: spool, logger: logger.with(label: "sbd"), clock: clock)
            }
        } catch {
            spool.close()
            throw RelayError("\(error)")
        }
        if let configPath, let warning = configuration.exposureWarning(path: configPath) { logger.warning(warning) }
        logger.notice(
            "started: spool \(configuration.spool.path), socket \(configuration.ingest.socket), destinations \(configuration.destinations.map { "\($0.name) → \(Redaction.url($0.url))" }.joined(separator: ", "))"
        )

        // Up: the socket listens and the spool is open.
        let readyStatus = "relaying to \(configuration.destinations.map(\.name).joined(separator: ", "))"
        systemd.notify("READY=1\nSTATUS=\(readyStatus)")
        let watchdog = Watchdog(
            monitor: health, systemd: systemd, file: HealthFile(socketPath: configuration.ingest.socket),
            logger: logger.with(label: "watchdog"), readyStatus: readyStatus)
        for variable in faults.ignored {
            logger.warning("\(variable) ignored: it is a test hook, honoured only with GEORELAY_TEST_HOOKS=1")
        }
        // Route, address and link changes wake the uplink monitor and the forwarders waiting for a
        // destination to come back; a socket that cannot be opened leaves the periodic looks and
        // connection attempts, said once.
        var routeWatch: RouteWatch?
        do { routeWatch = try RouteWatch() } catch {
            logger.warning("route changes are seen at the next look only: \(error)")
        }
        // One gate for every generation of forwarders: a reload does not forget a spent budget.
        let gate = UplinkGate(linkChanges: routeWatch?.changed, awaitsFirstLook: !configuration.uplinks.isEmpty)
        let uplinks = UplinkMonitor(
            spool: spool, logger: logger.with(label: "uplinks"), routeWatch: routeWatch, gate: gate
        ) { liveConfiguration.configuration }

        let parts = PartGroup(
            makeParts(
                watchdog: watchdog, uplinks: uplinks, routeWatch: routeWatch, ingest: ingest, spool: spool,
                listeners: (phones, sbd, metrics, page), logger: logger))
        await parts.run { parts in
            var current = configuration
            var signalled = signals.signals.makeAsyncIterator()
            while true {
                let generation = makeForwarders(current, spool: spool, gate: gate, logger: logger)
                let request = await run(generation, logger: logger) {
                    let request = await nextRequest(
                        from: &signalled, current: current, logger: logger, systemd: systemd)
                    if case .stop = request {
                        // systemd stops watching at STOPPING=1, and the loops stop next: no stall to report.
                        await parts.stop(Self.background)
                        // Intake next: what ingest still answers `ok` is stored before the forwarders finish.
                        await parts.stop(Self.intake)
                    }
                    return request
                }
                // What the old generation settled is committed before anything reads the cursors again.
                await spool.flush()
                guard case .reload(let next) = request else { break }
                do {
                    try await spool.register(
                        destinations: next.destinations.map {
                            DestinationRegistration(name: $0.name, buffered: $0.buffer)
                        })
                    var applied = next
                    applied.spool = current.spool
                    applied.ingest = current.ingest
                    current = applied
                    liveConfiguration.update(applied)
                    watchdog.setReadyStatus("relaying to \(current.destinations.map(\.name).joined(separator: ", "))")
                    logger.notice(
                        "reloaded \(configPath ?? ""): destinations \(current.destinations.map(\.name).joined(separator: ", "))"
                    )
                } catch {
                    logger.error("reload of \(configPath ?? "") failed, keeping the running configuration: \(error)")
                }
                systemd.notify("READY=1")
            }
        }
        // The spool's upkeep, the last part, has stopped with the group.
        logger.notice("stopped")
        spool.close()
    }

    /// The parts the relay runs beside its forwarders, in the order they stop: the background
    /// first (with the watchdog, so a loop stopping on purpose is never reported as stalled), then
    /// intake, and the spool's upkeep last, after the forwarders' final commits.
    private func makeParts(
        watchdog: Watchdog, uplinks: UplinkMonitor, routeWatch: RouteWatch?, ingest: IngestServer, spool: Spool,
        listeners: (phones: PhoneListener?, sbd: DirectIPListener?, metrics: HTTPListener?, page: HTTPListener?),
        logger: Logger
    ) -> [PartGroup.Part] {
        var parts: [PartGroup.Part] = []
        let wedges = faults.wedges
        if !wedges.isEmpty {
            let clock = self.clock
            parts.append(
                .init("wedges") {
                    await Self.inject(wedges, ingest: ingest, spool: spool, logger: logger, clock: clock)
                })
        }
        if listeners.page != nil {
            parts.append(.init("sampler") { await ChartSampler(spool: spool, logger: logger.with(label: "ui")).run() })
        }
        parts.append(.init("uplinks") { await uplinks.run() })
        if let sbd = sbdUplink(spool: spool, logger: logger) { parts.append(.init("sbd-uplink") { await sbd.run() }) }
        if let routeWatch { parts.append(.init("routes") { await routeWatch.run() }) }
        parts.append(.init("watchdog") { await watchdog.run() })
        // The HTTP listeners stop by cancellation: what their handlers hold is answered first.
        if let phones = listeners.phones { parts.append(.init("phones") { await phones.run() }) }
        if let sbd = listeners.sbd { parts.append(.init("sbd") { await sbd.run() }) }
        if let metrics = listeners.metrics { parts.append(.init("metrics") { await metrics.run() }) }
        if let page = listeners.page { parts.append(.init("page") { await page.run() }) }
        let grace = self.grace
        parts.append(.init(Self.ingestPart, run: { await ingest.run() }, stop: { await ingest.stop(grace: grace) }))
        parts.append(.init("upkeep") { await spool.runUpkeep() })
        return parts
    }

    /// The SBD modem aboard, when `sbd` configures one (not reloaded: a modem is not moved at sea).
    private func sbdUplink(spool: Spool, logger: Logger) -> SBDUplink? {
        configuration.sbd.map { SBDUplink(settings: $0, spool: spool, logger: logger.with(label: "sbd"), clock: clock) }
    }

    /// What stops first at a stop: everything but the listeners, intake and the spool's upkeep.
    private static let background = ["wedges", "sampler", "uplinks", "sbd-uplink", "routes", "watchdog"]
    /// Then the listeners and intake, before the forwarders finish.
    private static let intake = ["phones", "sbd", "metrics", "page", ingestPart]
    private static let ingestPart = "ingest"

    /// Runs the test hook's wedges at their times (from now, on the relay's clock), each blocking
    /// its part's thread.
    private static func inject(
        _ wedges: [TestWedge], ingest: IngestServer, spool: Spool, logger: Logger, clock: any RelayClock
    ) async {
        let startNs = clock.monotonicNs()
        for wedge in wedges.sorted(by: { $0.after < $1.after }) {
            await clock.sleep(untilNs: startNs.saturatingPlus(SystemClock.nanoseconds(wedge.after)))
            if Task.isCancelled { return }
            logger.warning(
                "test hook GEORELAY_TEST_WEDGE: stalling the \(wedge.part == .ingest ? "ingest loop" : "spool writer") for \(wedge.duration)"
            )
            switch wedge.part {
            case .ingest: ingest.stallForTesting(wedge.duration)
            case .writer: spool.stallWriterForTesting(wedge.duration)
            }
        }
    }

    /// What the signals ask of a running generation of forwarders.
    private enum Request {
        /// SIGHUP with a configuration that loads: rebuild the destinations from it.
        case reload(Configuration)
        /// SIGTERM or SIGINT, or the task was cancelled.
        case stop
    }

    /// Waits for a signal that ends the running generation; a reload whose configuration does
    /// not load leaves it running.
    private func nextRequest(
        from signals: inout AsyncStream<Int32>.Iterator, current: Configuration,
        logger: Logger, systemd: SystemdNotifier
    ) async -> Request {
        while let number = await signals.next() {
            if number == SIGHUP {
                guard let configPath else { continue }
                systemd.notify("RELOADING=1")
                do {
                    let next = try Configuration.load(path: configPath)
                    if next.spool != current.spool || next.ingest != current.ingest {
                        logger.warning("reload: spool and ingest settings take effect at the next restart")
                    }
                    return .reload(next)
                } catch {
                    logger.error("reload of \(configPath) failed, keeping the running configuration: \(error)")
                    systemd.notify("READY=1")
                    continue
                }
            }
            logger.notice("signal \(number): stopping")
            systemd.notify("STOPPING=1")
            break
        }
        return .stop
    }

    /// The forwarders of one configuration generation, built but not started.
    private func makeForwarders(_ configuration: Configuration, spool: Spool, gate: UplinkGate, logger: Logger) -> [(
        name: String, forwarder: any DestinationForwarder
    )] {
        var forwarders: [(name: String, forwarder: any DestinationForwarder)] = []
        for destination in configuration.destinations {
            if destination.tls.insecure {
                // Loud, at every start and reload: this is for a test bench, never for a voyage.
                logger.warning(
                    "destination \(destination.name): TLS certificate verification is OFF (insecure: true); anyone on the path can read and alter what is sent"
                )
            }
            do {
                switch destination.kind {
                case .traccar:
                    forwarders.append(
                        (
                            destination.name,
                            try TraccarForwarder(
                                settings: destination, spool: spool, logger: logger.with(label: ""), gate: gate,
                                clock: clock)
                        ))
                case .push:
                    forwarders.append(
                        (
                            destination.name,
                            try PushForwarder(
                                settings: destination, spool: spool, logger: logger.with(label: ""), gate: gate,
                                clock: clock)
                        ))
                }
            } catch {
                logger.error("destination \(destination.name) cannot start: \(error)")
            }
        }
        return forwarders
    }

    /// Runs one generation of forwarders as children of this task until `request` returns, then
    /// ends them: each is asked to finish (nothing new starts, what is in flight is answered and
    /// recorded); those still running `grace` later are abandoned (what they still have in flight
    /// is dropped and sent again by the next generation, at least once). Returns only when every
    /// forwarder of the generation has returned, so two generations never send at once.
    ///
    /// - Important: after the grace, an abandoned forwarder still takes a moment to return: up to
    ///   a second for a transfer curl is running, up to the connect timeout for a connection it is
    ///   opening. The reload waits for it rather than leave it sending beside the next generation.
    private func run(
        _ generation: [(name: String, forwarder: any DestinationForwarder)], logger: Logger,
        until request: () async -> Request
    ) async -> Request {
        enum Event: Sendable {
            case returned(Int)
            case graceOver
        }
        return await withTaskGroup(of: Event.self) { group in
            for (index, member) in generation.enumerated() {
                group.addTask {
                    await member.forwarder.run()
                    return .returned(index)
                }
            }
            let request = await request()
            for member in generation { member.forwarder.finish() }
            // Cancelled (the relay's task was), the sleep ends at once: abandon without waiting.
            group.addTask {
                await clock.sleep(for: grace)
                return .graceOver
            }
            var running = Set(generation.indices)
            while !running.isEmpty, let event = await group.next() {
                switch event {
                case .returned(let index):
                    running.remove(index)
                case .graceOver:
                    logger.warning(
                        "still finishing \(grace) after being asked: \(running.sorted().map { generation[$0].name }.joined(separator: ", ")); abandoning what they have in flight"
                    )
                    for index in running { generation[index].forwarder.abandon() }
                }
            }
            group.cancelAll()
            return request
        }
    }
}

/// A failure that ends the daemon, with a message for the operator.
package struct RelayError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelayIngest
import GeoRelaySpool
import Synchronization

/// The daemon: ingest, spool and one forwarder per destination, with a graceful lifecycle.
///
/// SIGTERM or SIGINT: stop intake, answer what is in flight, abandon
/// requests still running after the grace period, close the spool cleanly.
/// SIGHUP: re-read the configuration and rebuild the destinations (the
/// Traccar client's `updateConfig`); the spool's delivery state is kept.
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
    /// Where `NOTIFY_SOCKET`, `WATCHDOG_USEC` and the test hooks are read from.
    package var environment: [String: String] = ProcessInfo.processInfo.environment

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
        let (wedges, wedgeIgnored) = try TestWedge.schedule(environment: environment)
        let spool: Spool
        do {
            var settings = Spool.Settings(configuration.spool)
            settings.turnInterval = timing.turnInterval
            spool = try Spool(settings: settings, logger: Logger(label: "spool", sinks: [stderr] + extraSinks, minimumLevel: logLevel))
        } catch {
            throw RelayError("cannot open the spool \(configuration.spool.path): \(error)")
        }
        let logger = Logger(label: "relay", sinks: [stderr, SpoolLogSink(spool: spool)] + extraSinks, minimumLevel: logLevel)

        let ingest: IngestServer
        let health: HealthMonitor
        var phones: PhoneListener?
        var metrics: HTTPListener?
        do {
            try await spool.register(destinations: configuration.destinations.map { DestinationRegistration(name: $0.name, buffered: $0.buffer) })
            try spool.setSourceDevices(configuration.sourceIDs)
            var settings = IngestServer.Settings(configuration)
            settings.turnInterval = timing.turnInterval
            ingest = try IngestServer(settings: settings, spool: spool, logger: logger.with(label: "ingest"))
            health = HealthMonitor(parts: [HealthMonitor.Part(key: "ingest", heartbeat: ingest.heartbeat),
                                           HealthMonitor.Part(key: "writer", heartbeat: spool.writerHeartbeat)],
                                   configuration: timing)
            if let listen = configuration.metricsListen {
                metrics = try Metrics.serve(listen: listen, configuration: configuration, health: health)
            }
            if let listen = configuration.ingest.httpListen {
                phones = try PhoneListener(listen: listen, spool: spool, decoder: LineDecoder(maxFutureSeconds: configuration.ingest.maxFutureSeconds),
                                           logger: logger.with(label: "phones"))
            }
        } catch {
            spool.close()
            throw RelayError("\(error)")
        }
        logger.notice("started: spool \(configuration.spool.path), socket \(configuration.ingest.socket), destinations \(configuration.destinations.map { "\($0.name) → \(Redaction.url($0.url))" }.joined(separator: ", "))")

        // Up: the socket listens and the spool is open.
        let readyStatus = "relaying to \(configuration.destinations.map(\.name).joined(separator: ", "))"
        systemd.notify("READY=1\nSTATUS=\(readyStatus)")
        let watchdog = Watchdog(monitor: health, systemd: systemd, file: HealthFile(socketPath: configuration.ingest.socket),
                                logger: logger.with(label: "watchdog"), readyStatus: readyStatus)
        let watching = Task { await watchdog.run() }
        if wedgeIgnored {
            logger.warning("GEORELAY_TEST_WEDGE ignored: it is a test hook, honoured only with GEORELAY_TEST_HOOKS=1")
        }
        let wedging = wedges.isEmpty ? nil : Task { await Self.inject(wedges, ingest: ingest, spool: spool, logger: logger) }

        var current = configuration
        var forwarders = startForwarders(current, spool: spool, logger: logger)
        for await number in signals.signals {
            if number == SIGHUP {
                guard let configPath else { continue }
                systemd.notify("RELOADING=1")
                defer { systemd.notify("READY=1") }
                do {
                    let next = try Configuration.load(path: configPath)
                    if next.spool != current.spool || next.ingest != current.ingest {
                        logger.warning("reload: spool and ingest settings take effect at the next restart")
                    }
                    await stop(forwarders)
                    try await spool.register(destinations: next.destinations.map { DestinationRegistration(name: $0.name, buffered: $0.buffer) })
                    var applied = next
                    applied.spool = current.spool
                    applied.ingest = current.ingest
                    current = applied
                    forwarders = startForwarders(current, spool: spool, logger: logger)
                    watchdog.setReadyStatus("relaying to \(current.destinations.map(\.name).joined(separator: ", "))")
                    logger.notice("reloaded \(configPath): destinations \(current.destinations.map(\.name).joined(separator: ", "))")
                } catch {
                    logger.error("reload of \(configPath) failed, keeping the running configuration: \(error)")
                    if forwarders.isCancelled { forwarders = startForwarders(current, spool: spool, logger: logger) }
                }
                continue
            }
            logger.notice("signal \(number): stopping")
            systemd.notify("STOPPING=1")
            break
        }
        // systemd stops watching at STOPPING=1, and the loops stop next: no stall to report.
        wedging?.cancel()
        watching.cancel()
        await watching.value
        phones?.stop()
        metrics?.stop()
        await ingest.stop(grace: grace)
        await stop(forwarders)
        logger.notice("stopped")
        spool.close()
    }

    /// Runs the test hook's wedges at their times (from now), each blocking its part's thread.
    private static func inject(_ wedges: [TestWedge], ingest: IngestServer, spool: Spool, logger: Logger) async {
        let start = ContinuousClock.now
        for wedge in wedges.sorted(by: { $0.after < $1.after }) {
            do { try await Task.sleep(until: start + wedge.after) } catch { return }
            logger.warning("test hook GEORELAY_TEST_WEDGE: stalling the \(wedge.part == .ingest ? "ingest loop" : "spool writer") for \(wedge.duration)")
            switch wedge.part {
            case .ingest: ingest.stallForTesting(wedge.duration)
            case .writer: spool.stallWriterForTesting(wedge.duration)
            }
        }
    }

    /// The forwarders of one configuration generation, run as one task so a
    /// reload can stop them together. The task is always awaited (`stop`).
    private func startForwarders(_ configuration: Configuration, spool: Spool, logger: Logger) -> Task<Void, Never> {
        var forwarders: [any DestinationForwarder] = []
        for destination in configuration.destinations {
            if destination.tls.insecure {
                // Loud, at every start and reload: this is for a test bench, never for a voyage.
                logger.warning("destination \(destination.name): TLS certificate verification is OFF (insecure: true); anyone on the path can read and alter what is sent")
            }
            do {
                switch destination.kind {
                case .traccar: forwarders.append(try TraccarForwarder(settings: destination, spool: spool, logger: logger.with(label: "")))
                case .push: forwarders.append(try PushForwarder(settings: destination, spool: spool, logger: logger.with(label: "")))
                }
            } catch {
                logger.error("destination \(destination.name) cannot start: \(error)")
            }
        }
        return Task {
            await withTaskGroup(of: Void.self) { group in
                for forwarder in forwarders {
                    group.addTask { await forwarder.run() }
                }
            }
        }
    }

    /// Cancels the forwarders and waits for them, at most `grace`: requests in
    /// flight are abandoned (the spool still has their positions), and a
    /// forwarder stuck past that is left behind rather than holding up shutdown.
    private func stop(_ forwarders: Task<Void, Never>) async {
        forwarders.cancel()
        let finished = OneShot()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            finished.arm(continuation)
            Task { await forwarders.value; finished.fire() }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(grace.components.seconds * 1000))) { finished.fire() }
        }
    }
}

/// Resumes one continuation once, whichever of several events comes first.
final class OneShot: Sendable {
    private let state = Mutex<CheckedContinuation<Void, Never>?>(nil)
    func arm(_ continuation: CheckedContinuation<Void, Never>) { state.withLock { $0 = continuation } }
    func fire() { state.withLock { continuation in continuation?.resume(); continuation = nil } }
}

/// A failure that ends the daemon, with a message for the operator.
package struct RelayError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

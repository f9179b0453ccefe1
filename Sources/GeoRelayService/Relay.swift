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
package struct Relay: Sendable {
    package var configuration: Configuration
    /// Re-read on SIGHUP; nil disables reloading.
    package var configPath: String?
    /// Bound on each shutdown step.
    package var grace: Duration = .seconds(5)
    package var logLevel: LogLevel = .info
    package var extraSinks: [any LogSink] = []

    package init(configuration: Configuration, configPath: String?) {
        self.configuration = configuration
        self.configPath = configPath
    }

    /// Runs until SIGTERM/SIGINT (or until the task is cancelled).
    package func run() async throws {
        let signals = SignalStream([SIGTERM, SIGINT, SIGHUP])
        let stderr = StandardErrorLogSink()
        let spool: Spool
        do {
            spool = try Spool(settings: Spool.Settings(configuration.spool), logger: Logger(label: "spool", sinks: [stderr] + extraSinks, minimumLevel: logLevel))
        } catch {
            throw RelayError("cannot open the spool \(configuration.spool.path): \(error)")
        }
        let logger = Logger(label: "relay", sinks: [stderr, SpoolLogSink(spool: spool)] + extraSinks, minimumLevel: logLevel)

        let ingest: IngestServer
        var phones: PhoneListener?
        var metrics: HTTPListener?
        do {
            try await spool.register(destinations: configuration.destinations.map { DestinationRegistration(name: $0.name, buffered: $0.buffer) })
            try spool.setSourceDevices(configuration.sourceIDs)
            ingest = try IngestServer(settings: IngestServer.Settings(configuration), spool: spool, logger: logger.with(label: "ingest"))
            if let listen = configuration.metricsListen {
                metrics = try Metrics.serve(listen: listen, configuration: configuration)
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
        let systemd = SystemdNotifier()
        systemd.notify("READY=1\nSTATUS=relaying to \(configuration.destinations.map(\.name).joined(separator: ", "))")
        let watchdog = systemd.watchdogInterval.map { interval in
            Task {
                while !Task.isCancelled {
                    systemd.notify("WATCHDOG=1")
                    try? await Task.sleep(for: interval)
                }
            }
        }
        defer { watchdog?.cancel() }

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
        phones?.stop()
        metrics?.stop()
        await ingest.stop(grace: grace)
        await stop(forwarders)
        logger.notice("stopped")
        spool.close()
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

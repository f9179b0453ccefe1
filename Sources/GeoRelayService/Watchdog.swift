import GeoRelayCore
import Glibc
import Synchronization

/// Keeps systemd's watchdog fed only while the relay's loops turn over.
///
/// A keep-alive sent from a task of its own would prove only that the Swift runtime
/// schedules tasks; this one goes out only while the ingest loop and the spool writer
/// have each beaten within `WatchdogSec`, so systemd restarts a relay whose loop or
/// writer is wedged (a stuck fsync, a lock never released). Each check also refreshes
/// the health file `georelay status` reads.
package final class Watchdog: Sendable {
    private let monitor: HealthMonitor
    private let systemd: SystemdNotifier
    private let file: HealthFile?
    private let logger: Logger
    /// What `STATUS=` says while all is well (the destinations); a reload changes it.
    private let readyStatus: Mutex<String>

    package init(
        monitor: HealthMonitor, systemd: SystemdNotifier, file: HealthFile?, logger: Logger, readyStatus: String
    ) {
        self.monitor = monitor
        self.systemd = systemd
        self.file = file
        self.logger = logger
        self.readyStatus = Mutex(readyStatus)
    }

    package func setReadyStatus(_ status: String) {
        readyStatus.withLock { $0 = status }
    }

    /// Checks every `checkInterval` of the monitor's clock until cancelled, then removes the health file.
    package func run() async {
        var state = WatchdogState(
            keepAliveInterval: monitor.configuration.keepAliveInterval,
            checkInterval: monitor.configuration.checkInterval)
        var fileFailed = false
        while !Task.isCancelled {
            let report = monitor.report()
            if let file {
                do {
                    try file.write(report)
                    fileFailed = false
                } catch {
                    if !fileFailed {
                        logger.warning(
                            "cannot write the health file \(file.path) (status shows health as unknown): \(error)")
                    }
                    fileFailed = true
                }
            }
            for action in state.next(report, readyStatus: readyStatus.withLock { $0 }) {
                switch action {
                case .notify(let message): systemd.notify(message)
                case .log(let level, let message): logger.log(level, message)
                }
            }
            await monitor.clock.sleep(for: monitor.configuration.checkInterval)
        }
        file?.remove()
    }
}

/// What the watchdog does after each check: a state machine over the parts' health, so
/// its decisions (when to keep systemd's watchdog fed, what to log once per stall) are
/// tested without a clock.
package struct WatchdogState: Sendable {
    package enum Action: Sendable, Equatable {
        /// An sd_notify datagram: `WATCHDOG=1` or `STATUS=…`.
        case notify(String)
        case log(LogLevel, String)
    }

    private let keepAliveMs: Int64?
    /// Half a check of slack, so keep-alives go every `keepAliveInterval`, not every
    /// `keepAliveInterval` plus one check.
    private let slackMs: Int64
    private var lastKeepAliveMs: Int64?
    /// The parts stalled now (by key), with the last turn before each stall.
    private var stalledSince: [String: Int64] = [:]

    package init(keepAliveInterval: Duration?, checkInterval: Duration) {
        keepAliveMs = keepAliveInterval?.wholeMilliseconds
        slackMs = checkInterval.wholeMilliseconds / 2
    }

    package mutating func next(_ report: HealthReport, readyStatus: String) -> [Action] {
        var actions: [Action] = []
        var changed = false
        for part in report.parts {
            let alive = report.isAlive(part)
            if !alive, stalledSince[part.key] == nil {
                // Once per episode: the log says which part and what follows from it.
                stalledSince[part.key] = part.lastTurnMs
                changed = true
                let consequence =
                    keepAliveMs == nil
                    ? "/healthz answers 503 until it turns over again"
                    : "withholding the watchdog keep-alive, so systemd restarts the relay unless it turns over again"
                actions.append(
                    .log(
                        .error,
                        "\(part.name) stalled: no turn for \(HealthReport.seconds(report.ageMs(part))) (limit \(HealthReport.seconds(report.stallAfterMs))); \(consequence)"
                    ))
            } else if alive, let since = stalledSince[part.key] {
                stalledSince[part.key] = nil
                changed = true
                actions.append(
                    .log(
                        .notice,
                        "\(part.name) turning over again after \(HealthReport.seconds(max(0, part.lastTurnMs - since))) without a turn"
                    ))
            }
        }
        if changed {
            let stalled = report.stalled
            actions.append(
                .notify(
                    "STATUS="
                        + (stalled.isEmpty
                            ? readyStatus
                            : stalled.map {
                                "\($0.name) stalled (no turn for \(HealthReport.seconds(report.ageMs($0))))"
                            }.joined(separator: ", ")
                                + (keepAliveMs == nil ? "" : "; watchdog keep-alive withheld"))))
        }
        if let keepAliveMs, report.isHealthy, lastKeepAliveMs.map({ report.atMs - $0 >= keepAliveMs - slackMs }) ?? true
        {
            lastKeepAliveMs = report.atMs
            actions.append(.notify("WATCHDOG=1"))
        }
        return actions
    }
}

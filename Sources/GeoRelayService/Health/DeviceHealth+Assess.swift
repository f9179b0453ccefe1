import GeoRelayCore
import GeoRelayIngest
import GeoRelaySpool
import Glibc

/// Gathering what the checks judge: the only place that touches the machine (statvfs,
/// adjtimex, the spool file), so `status`, `/healthz` and `/metrics` cannot disagree.
extension DeviceHealth {
    /// Every check, in the order the screen lists them.
    ///
    /// - Parameters:
    ///   - reader: the spool, opened read-only; nil when it could not be (`readError` says why).
    ///   - status: what `status` read from it (nil when that failed).
    ///   - loops: the running relay's loops, from its health file or its monitor.
    ///   - checkIntegrity: run `PRAGMA quick_check` too (reads the whole file: `status --health`
    ///     and `check --spool` ask for it, the screen and each scrape do not).
    ///   - nowMs: the wall time the receivers, the clock and the links are judged at.
    package static func assess(
        configuration: Configuration, reader: SpoolReader?, readError: String?, status: SpoolStatus?,
        running: Bool, loops: StatusReport.Health, checkIntegrity: Bool = false,
        clockSync: ClockSync = .read(), disk: Result<DiskSpace, DiskSpaceError>? = nil,
        nowMs: Int64, thresholds: HealthThresholds = HealthThresholds()
    ) -> DeviceHealth {
        let path = configuration.spool.path
        // Run even when the read failed: quick_check says what is wrong with the file.
        let problems =
            checkIntegrity ? ((try? SpoolReader.integrityProblems(path: path)) ?? ["no spool at \(path)"]) : nil
        let receivers = (try? reader?.receivers(nowMs: nowMs)) ?? []
        var jump: ClockJump?
        if case .known(let report) = loops { jump = report.clockJump }
        // The receivers' newest fix, leaving out the ones a week-number rollover dated 19.6 years back.
        let newestFix = receivers.compactMap { receiver -> Int64? in
            guard let fix = receiver.lastFixMs else { return nil }
            if let received = receiver.lastReceivedMs, WeekRollover.isRolledOver(fixMs: fix, receivedMs: received) {
                return nil
            }
            return fix
        }.max()
        let destinations = configuration.destinations.map { settings in
            status?.destinations.first { $0.name == settings.name }
                ?? .notStarted(name: settings.name, buffered: settings.buffer)
        }
        var waitingSince: [String: Int64] = [:]
        for d in destinations where d.state != "online" && d.lastSuccessMs == nil && d.pending > 0 {
            if let since = try? reader?.oldestWaitingReceivedMs(destination: d.name) { waitingSince[d.name] = since }
        }
        return DeviceHealth(checks: [
            HealthChecks.loops(running: running, health: loops),
            HealthChecks.spool(readError: readError, problems: problems),
            HealthChecks.disk(
                space: disk ?? DiskSpace.of(directoryOf: path), fileBytes: status?.fileBytes ?? 0,
                walBytes: reader?.walBytes ?? 0, maxBytes: configuration.spool.maxBytes, thresholds: thresholds),
            HealthChecks.clock(
                sync: clockSync, nowMs: nowMs, newestFixMs: newestFix, jump: jump, thresholds: thresholds),
            HealthChecks.sources(receivers, nowMs: nowMs, thresholds: thresholds),
            HealthChecks.links(
                destinations, waitingSinceMs: waitingSince, running: running, nowMs: nowMs, thresholds: thresholds),
        ])
    }

    /// The running relay's view, for `/healthz` and `/metrics`: the spool opened afresh, the
    /// loops judged by the monitor itself, the rest at `nowMs` (the relay's wall time).
    package static func assessRunning(
        configuration: Configuration, monitor: HealthMonitor?, nowMs: Int64, faults: FaultInjection = .none
    ) -> (health: DeviceHealth, status: SpoolStatus?) {
        let (reader, status, readError) = openSpool(configuration, nowMs: nowMs)
        let loops: StatusReport.Health = monitor.map { .known($0.report()) } ?? .unknown("no monitor in this process")
        return (
            assess(
                configuration: configuration, reader: reader, readError: readError, status: status, running: true,
                loops: loops, clockSync: faults.clockSync ?? .read(), nowMs: nowMs), status
        )
    }

    /// `status --health`'s view from another process: the loops from the relay's health file,
    /// and a spool that cannot be read (or is corrupt) judged as failing rather than thrown,
    /// so a script gets exit status 2 and the reason. Judged at `clock`'s now: the machine's,
    /// whose monotonic time the relay's health file is written in.
    package static func assessFromOutside(
        configuration: Configuration, checkIntegrity: Bool, clock: any RelayClock = SystemClock(),
        faults: FaultInjection = .none
    ) -> DeviceHealth {
        let nowMs = clock.nowMs()
        let (reader, status, readError) = openSpool(configuration, nowMs: nowMs)
        let running = IngestServer.isRunning(socketPath: configuration.ingest.socket)
        let loops =
            running
            ? StatusReport.health(
                from: HealthFile(socketPath: configuration.ingest.socket),
                nowMs: clock.monotonicMs())
            : .unknown("the relay is not running")
        return assess(
            configuration: configuration, reader: reader, readError: readError, status: status, running: running,
            loops: loops,
            checkIntegrity: checkIntegrity, clockSync: faults.clockSync ?? .read(), nowMs: nowMs)
    }

    private static func openSpool(_ configuration: Configuration, nowMs: Int64) -> (
        SpoolReader?, SpoolStatus?, String?
    ) {
        do {
            let reader = try SpoolReader.open(path: configuration.spool.path)
            do {
                return (reader, try reader.status(nowMs: nowMs), nil)
            } catch {
                return (reader, nil, "\(error)")
            }
        } catch {
            return (nil, nil, "\(error)")
        }
    }
}

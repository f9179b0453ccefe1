import GeoRelayCore
import GeoRelaySpool

/// `georelay status`: one report, as a screen or JSON, or the screen redrawn until interrupted.
extension Commands {
    static func status(_ invocation: Invocation) async throws -> ExitCode {
        let configuration = invocation.configuration
        if invocation.arguments.flag("--watch") {
            try await watchStatus(
                configuration: configuration, console: invocation.console, faults: invocation.faults,
                clock: invocation.clock)
            return .success
        }
        if invocation.arguments.flag("--health") {
            let device = await onDedicatedThread(named: "georelay.status") {
                DeviceHealth.assessFromOutside(
                    configuration: configuration, checkIntegrity: true, clock: invocation.clock,
                    faults: invocation.faults)
            }
            invocation.console.write(
                invocation.arguments.flag("--json")
                    ? device.json.jsonText + "\n" : ControlEscaping.escapeLines("\(device.state.name)\n" + device.text))
            return device.exitCode
        }
        let json = invocation.arguments.flag("--json")
        let report = try await onDedicatedThread(named: "georelay.status") {
            try StatusReport.load(
                configuration: configuration, clock: invocation.clock, sketches: json ? .fresh : .none,
                faults: invocation.faults)
        }
        invocation.console.write(json ? report.json.jsonText + "\n" : ControlEscaping.escapeLines(report.text))
        return .success
    }

    /// `georelay check --spool`: quick_check on a read-only connection; 0 when sound, 1 with the problems.
    static func checkSpool(_ invocation: Invocation) throws -> ExitCode {
        let path = invocation.configuration.spool.path
        let problems = try SpoolReader.integrityProblems(path: path)
        guard problems.isEmpty else {
            invocation.console.line(
                "spool \(path): quick_check found \(problems.count == 1 ? "a problem" : "\(problems.count) problems"):")
            for problem in problems { invocation.console.line("  \(problem)") }
            return .failure
        }
        invocation.console.line("spool \(path): ok (quick_check)")
        return .success
    }

    /// `georelay check --schema`: "SPOOL READS PATH", for a shell to `read`. The path goes last
    /// because it may hold spaces.
    static func checkSchema(_ invocation: Invocation) throws -> ExitCode {
        let path = invocation.configuration.spool.path
        let version = try SpoolReader.schemaVersion(path: path)
        invocation.console.line("\(version) \(SpoolReader.newestReadableSchema) \(path)")
        return .success
    }

    /// Redraws the status screen every `interval` until the task is cancelled (then throws
    /// `CancellationError`) or the process is interrupted.
    ///
    /// The wait is `clock`'s sleep, which holds no thread, and each report is read on a thread
    /// of its own (SQLite blocks): a watch left open for days never occupies the cooperative pool.
    package static func watchStatus(
        configuration: Configuration, console: Console, every interval: Duration = .seconds(2),
        faults: FaultInjection = .none, clock: any RelayClock = SystemClock()
    ) async throws {
        while true {
            let text = await onDedicatedThread(named: "georelay.status") {
                (try? StatusReport.load(configuration: configuration, clock: clock, faults: faults).text)
                    ?? "no spool at \(configuration.spool.path) yet\n"
            }
            try Task.checkCancellation()
            // Home and clear, then the screen in one write.
            console.write("\u{1B}[H\u{1B}[2J" + ControlEscaping.escapeLines(text))
            await clock.sleep(for: interval)
            try Task.checkCancellation()
        }
    }
}

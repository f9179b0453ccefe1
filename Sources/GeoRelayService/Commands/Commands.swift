import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import Glibc

/// The work of every `georelay` command, one function per command taking its `Invocation`
/// (`GeoRelayCommandLine.commands` says which command calls which), beside the typed
/// functions they are made of, which the tests and the benchmarks call too.
///
/// A command returns its `ExitCode`, writes to the invocation's `Console` and throws
/// `UsageError` for a mistake that only the configuration could reveal (a destination
/// it does not name); anything else it throws ends it with `ExitCode.failure`.
package enum Commands {
    /// `georelay logs`.
    static func logs(_ invocation: Invocation) async throws -> ExitCode {
        if invocation.arguments.flag("--clear") {
            try await clearLogs(configuration: invocation.configuration)
        } else {
            let configuration = invocation.configuration
            let limit = invocation.arguments.integer("--limit") ?? 10_000
            invocation.console.write(
                try await onDedicatedThread(named: "georelay.logs") {
                    try logs(configuration: configuration, limit: limit)
                })
        }
        return .success
    }

    /// The diagnostic log, oldest first, one line per entry with a millisecond timestamp.
    package static func logs(configuration: Configuration, limit: Int = 10_000) throws -> String {
        let reader = try SpoolReader.open(path: configuration.spool.path)
        return try reader.logEntries(limit: limit).map { entry in
            // Escaped again on the way out: an entry an older version wrote may hold anything.
            "\(Timestamp.iso8601(milliseconds: entry.timeMs)) \(entry.level.name) \(ControlEscaping.escape(entry.message))\n"
        }.joined()
    }

    /// Empties the diagnostic log through the spool's writer (works while the daemon runs:
    /// see `Spool.openExisting`).
    package static func clearLogs(configuration: Configuration) async throws {
        try await withSpoolWriter(Spool.Settings(configuration.spool)) { spool in try await spool.clearLog() }
    }

    /// `georelay check`: the effective configuration, secrets masked (the parser and the
    /// loader have already refused what is wrong, with 64 or 78).
    static func check(_ invocation: Invocation) throws -> ExitCode {
        if invocation.arguments.flag("--spool") { return try checkSpool(invocation) }
        if invocation.arguments.flag("--schema") { return try checkSchema(invocation) }
        // `run` logs the warning (where `georelay logs` shows it too); `check` says it here.
        if let path = invocation.configurationPath, let warning = invocation.configuration.exposureWarning(path: path) {
            invocation.console.error("warning: \(warning)")
        }
        invocation.console.line(invocation.configuration.effective.prettyText())
        return .success
    }

    /// `georelay run`: the daemon, until SIGTERM or SIGINT.
    static func runRelay(_ invocation: Invocation) async throws -> ExitCode {
        var relay = Relay(configuration: invocation.configuration, configPath: invocation.configurationPath)
        relay.faults = invocation.faults
        relay.clock = invocation.clock
        if let level = invocation.arguments.text("--log-level") {
            guard let parsed = LogLevel.allCases.first(where: { $0.name == level }) else {
                preconditionFailure("the parser admits only level names")
            }
            relay.logLevel = parsed
        }
        try await relay.run()
        return .success
    }
}

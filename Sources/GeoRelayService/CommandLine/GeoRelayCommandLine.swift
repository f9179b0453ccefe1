import FoundationEssentials
import GeoRelayCore
import Glibc

/// `georelay <command> [options]`: finds the command, parses its arguments, loads the
/// configuration and runs the command's work, turning what went wrong into an `ExitCode`.
///
/// The executable only hands in argv and the terminal; the integration tests run the
/// real binary and the unit tests call `run(_:console:)` directly with files for a console.
package enum GeoRelayCommandLine {
    /// Where the configuration is looked for without `--config`.
    package static let defaultConfigurationPath = "config/georelay.json5"

    package static func command(named name: String) -> CommandSpec? {
        commands.first { $0.name == name }
    }

    /// `georelay --help`: every command with its summary, the common options and the exit statuses.
    package static var usage: String {
        var text = "usage: georelay <command> [options]\n\n"
        text += CommandSpec.table(commands.map { ($0.name, $0.summary) }, heading: "commands:") + "\n"
        text +=
            CommandSpec.table(
                [
                    (OptionSpec.configuration.name + " PATH", OptionSpec.configuration.help),
                    ("--help", "help for a command (also: georelay help COMMAND)"),
                ], heading: "common options:") + "\n"
        text += CommandSpec.table(ExitCode.allCases.map { ("\($0.rawValue)", $0.meaning) }, heading: "exit status:")
        text += "\nOptions take their value as --name VALUE or --name=VALUE; each may be given once.\n"
        return text
    }

    /// Runs the command `arguments` (argv without the program's name) describe.
    package static func run(_ arguments: [String], console: Console) async -> ExitCode {
        guard let name = arguments.first else {
            console.error(UsageError(command: nil, "no command given").description)
            return .usage
        }
        if name == "--help" || name == "-h" || name == "help" {
            guard arguments.count > 1 else {
                console.write(usage)
                return .success
            }
            guard arguments.count == 2, let spec = command(named: arguments[1]) else {
                console.error(
                    UsageError(
                        command: nil,
                        "help takes one command's name, not '\(arguments.dropFirst().joined(separator: " "))'"
                    ).description)
                return .usage
            }
            console.write(spec.help)
            return .success
        }
        guard let spec = command(named: name) else {
            console.error(UsageError(command: nil, "unknown command '\(name)'").description)
            return .usage
        }
        let parsed: ParsedArguments
        do {
            parsed = try spec.parse(Array(arguments.dropFirst()))
        } catch {
            console.error(error.description)
            return .usage
        }
        if parsed.wantsHelp {
            console.write(spec.help)
            return .success
        }
        let configuration: Configuration
        let configurationPath: String?
        do {
            (configuration, configurationPath) = try loadConfiguration(
                explicitPath: parsed.text(OptionSpec.configuration.name))
        } catch {
            console.error("configuration \(error.path): \(error.error)")
            return .configuration
        }
        // The one place the test hooks' variables are read.
        let faults: FaultInjection
        do {
            faults = try FaultInjection.from(environment: ProcessInfo.processInfo.environment)
        } catch {
            console.error("\(spec.name): \(error)")
            return .failure
        }
        let invocation = Invocation(
            command: spec.name, arguments: parsed, configuration: configuration,
            configurationPath: configurationPath, console: console, faults: faults)
        do {
            switch spec.work {
            case .blocking(let work):
                return try await onDedicatedThread(named: "georelay.\(spec.name)") { try work(invocation) }
            case .async(let work):
                return try await work(invocation)
            }
        } catch let error as UsageError {
            console.error(error.description)
            return .usage
        } catch {
            console.error("\(spec.name): \(error)")
            return .failure
        }
    }

    struct ConfigurationLoadError: Error {
        var path: String
        var error: ConfigError
    }

    /// The named file, else the default file when it exists, else built-in defaults (path nil).
    static func loadConfiguration(explicitPath: String?) throws(ConfigurationLoadError) -> (Configuration, String?) {
        let path = explicitPath ?? defaultConfigurationPath
        if explicitPath == nil, !FileManager.default.fileExists(atPath: path) { return (Configuration(), nil) }
        do {
            return (try Configuration.load(path: path), path)
        } catch {
            throw ConfigurationLoadError(path: path, error: error)
        }
    }
}

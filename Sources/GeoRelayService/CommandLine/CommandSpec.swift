import GeoRelayCore

/// The declarative description of one `georelay` command: its name, what it is for,
/// the options and words it takes, and the work it calls.
///
/// Parsing (`CommandSpec.parse(_:)`), `georelay <command> --help` and every usage error
/// come from this one value, so the help cannot drift from what the parser accepts;
/// a test checks docs/operating.md's command table against the same values.
package struct CommandSpec: Sendable {
    package var name: String
    /// One line for `georelay --help`.
    package var summary: String
    /// A paragraph for `georelay <command> --help`: behaviour at the edges, exit statuses.
    package var details: String
    package var options: [OptionSpec]
    package var positionals: [PositionalSpec]
    package var constraints: [Constraint]
    package var work: Work

    package init(
        name: String, summary: String, details: String, options: [OptionSpec] = [], positionals: [PositionalSpec] = [],
        constraints: [Constraint] = [], work: Work
    ) {
        precondition(Set(options.map(\.name)).count == options.count, "\(name): an option is declared twice")
        self.name = name
        self.summary = summary
        self.details = details
        // Every command reads the configuration (a collector takes its socket from it).
        self.options = options + [.configuration]
        self.positionals = positionals
        self.constraints = constraints
        self.work = work
    }

    /// The declared option of that name (`--limit`, `-o`), if any.
    package func option(named name: String) -> OptionSpec? {
        options.first { $0.name == name }
    }

    /// What a command does once its arguments are parsed and the configuration is loaded.
    package enum Work: Sendable {
        /// Blocking work (SQLite reads, a collector's read loop): run on a thread of its own,
        /// never on Swift's cooperative pool, whose few threads the async commands need.
        case blocking(@Sendable (Invocation) throws -> ExitCode)
        /// Work that awaits (the daemon, requests through `HTTPWorker`, `status --watch`'s timer).
        case async(@Sendable (Invocation) async throws -> ExitCode)
    }

    /// A rule over several options (or words) at once, checked after each was parsed alone.
    package enum Constraint: Sendable {
        /// At most one of these may be given (`--json` or `--watch`).
        case atMostOne([String])
        /// Exactly one of these must be given, naming what they are (a collector's source).
        case exactlyOne([String], what: String)
        /// The first only together with the second (`--baud` only with `--serial`).
        case requires(String, String)
    }
}

/// One option of a command: `--name` alone (a flag), or `--name VALUE` / `--name=VALUE`.
package struct OptionSpec: Sendable {
    package var name: String
    package var kind: Kind
    package var help: String
    package var required: Bool

    package init(_ name: String, _ kind: Kind, help: String, required: Bool = false) {
        precondition(
            name.hasPrefix("--") || (name.count == 2 && name.hasPrefix("-")), "option \(name) is neither --long nor -x")
        precondition(!(required && kind == .flag), "a required flag is not an option: \(name)")
        self.name = name
        self.kind = kind
        self.help = help
        self.required = required
    }

    /// What an option's value must be; the parser checks it, so a command gets typed values.
    package enum Kind: Sendable, Equatable {
        /// No value: present or not.
        case flag
        /// Any non-empty text; `placeholder` names it in the help (`ID`, `PATH`).
        case text(placeholder: String)
        /// A finite decimal number, within `range` when one is given.
        case number(placeholder: String, range: ClosedRange<Double>?)
        /// A whole number of at least 1.
        case positiveInteger(placeholder: String)
        /// ISO 8601 with a zone, or Unix seconds; parsed to milliseconds.
        case time
        /// One of these words.
        case choice([String])

        /// How the value is written in usage lines: `ID`, `TIME`, `gpx|geojson|csv`.
        package var placeholder: String? {
            switch self {
            case .flag: nil
            case .text(let placeholder), .number(let placeholder, _), .positiveInteger(let placeholder): placeholder
            case .time: "TIME"
            case .choice(let words): words.joined(separator: "|")
            }
        }
    }

    /// `--config PATH`, which every command takes.
    package static let configuration = OptionSpec(
        "--config", .text(placeholder: "PATH"),
        help: "the configuration file (default config/georelay.json5; built-in defaults when that file does not exist)")
}

/// A word a command takes besides its options (`duty on`, `token refresh`, `collect -`).
package struct PositionalSpec: Sendable {
    package var name: String
    /// The words allowed; the usage line shows them as `on|off`.
    package var choices: [String]
    package var help: String
    package var required: Bool

    package init(_ name: String, choices: [String], help: String, required: Bool = true) {
        self.name = name
        self.choices = choices
        self.help = help
        self.required = required
    }
}

/// What a command's work is handed: its parsed arguments, the loaded configuration, where to write.
package struct Invocation: Sendable {
    package var command: String
    package var arguments: ParsedArguments
    package var configuration: Configuration
    /// The file the configuration came from; nil when built-in defaults were used.
    package var configurationPath: String?
    package var console: Console
    /// What a test injects (`FaultInjection`); `.none` outside the tests.
    package var faults: FaultInjection
    /// The time the command runs on (the daemon's, `send`'s fix time, `status`'s now): the system's
    /// outside the tests.
    package var clock: any RelayClock

    package init(
        command: String, arguments: ParsedArguments, configuration: Configuration, configurationPath: String?,
        console: Console, faults: FaultInjection = .none, clock: any RelayClock = SystemClock()
    ) {
        self.command = command
        self.arguments = arguments
        self.configuration = configuration
        self.configurationPath = configurationPath
        self.console = console
        self.faults = faults
        self.clock = clock
    }
}

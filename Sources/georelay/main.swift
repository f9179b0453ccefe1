import Foundation
import GeoRelayCore
import GeoRelayCollect
import GeoRelayService
import GeoRelaySpool

// The thin executable: parse arguments, load the configuration, call the core.

let usage = """
    usage: georelay <command> [options]

    commands:
      run      run the relay in the foreground (SIGTERM/SIGINT stop, SIGHUP reloads)
      status   show delivery state, backlog and counters (works while the relay is down)
      logs     print the diagnostic log, oldest first
      send     upload one position now, bypassing the spool
      replay   send a window of spooled history to a destination again
      export   write spooled history as GPX, GeoJSON or CSV
      check    validate a configuration and print the effective values (secrets masked)
      collect  feed one GPS unit (serial, UDP, TCP, gpsd, a file) into the relay
      duty     send the on-duty or off-duty event to push destinations
      token    refresh a push destination's token now (login mode)

    common options:
      --config PATH   configuration file (default config/georelay.json5)
      --help          help for a command
    """

let commandHelp: [String: String] = [
    "run": """
        usage: georelay run [--config PATH] [--log-level error|warning|notice|info|debug]
        Runs the relay in the foreground: ingest socket, spool, forwarders.
        """,
    "status": """
        usage: georelay status [--config PATH] [--json | --watch]
        Shows each destination's state, backlog, oldest pending age, last success and error,
        the spool's size against its quota, the ingest counters and the health of the running
        relay's ingest loop and spool writer. Reads the spool read-only.
        """,
    "logs": """
        usage: georelay logs [--config PATH] [--clear] [--limit N]
        Prints the diagnostic log (newest 10,000 entries kept), oldest first; --clear empties it.
        """,
    "replay": """
        usage: georelay replay --destination NAME --since TIME [--until TIME] [--device ID] [--all] [--config PATH]
        Queues the spooled positions in the window for the destination again (after a server lost them),
        through the destination's filter unless --all. The queue is in the spool, so a relay restart goes on
        with it; the forwarder sends it as history (archive=true for Traccar) when nothing live waits, and
        status shows it as replayPending. Devices whose history no longer reaches back that far are reported.
        """,
    "export": """
        usage: georelay export --format gpx|geojson|csv [--device ID] [--since TIME] [--until TIME] [-o FILE] [--config PATH]
        Streams the spool's positions, one GPX track (or GeoJSON LineString feature) per device, in fix-time
        order; speed, course and accuracy go in GPX extensions (namespace urn:georelay:gpx:1). TIME is ISO 8601
        with a zone or Unix seconds. Works while the relay runs.
        """,
    "check": """
        usage: georelay check [--config PATH]
        Validates the configuration and prints every effective value, defaults filled in and secrets
        masked, without starting anything. Exit status 0, or 78 (EX_CONFIG) naming the key at fault.
        """,
    "collect": """
        usage: georelay collect --device ID SOURCE [--socket PATH] [--config PATH]
          SOURCE: --serial DEVICE [--baud 4800] | --udp [HOST:]PORT | --tcp HOST:PORT
                  | --gpsd [HOST[:PORT]] | --file PATH [--realtime] | -   (stdin)
        Writes one GPS unit's lines (NMEA, JSON, OsmAnd, gpsd TPV) into the relay's socket with acks on,
        keeps what is not acknowledged and resends it when the relay restarts. Serial and TCP sources
        are reopened when they come back. With --gpsd, --device may be {path} (gpsd's device path as
        the id) or PATH=ID[,PATH=ID...]. Exit status 0 when a file is done; 1 when the source cannot be opened.
        """,
    "duty": """
        usage: georelay duty on|off [--destination NAME] [--config PATH]
        Sends the DUTY event (on_duty or off_duty) to each push destination, or the named one,
        with the current token (getting one first in login mode). Exit status 0 only on 2xx.
        """,
    "token": """
        usage: georelay token refresh [--destination NAME] [--config PATH]
        Gets a new token now for each push destination in login mode, or the named one, and stores it
        (mode 0600, beside the spool) where the running relay picks it up.
        """,
    "send": """
        usage: georelay send --device ID --lat DEG --lon DEG [--alarm NAME] [--destination NAME] [--config PATH]
        Uploads one position (time: now) straight to the destination(s), bypassing the spool.
        Exit status 0 only when every upload succeeded.
        """,
]

/// A usage error: one line, exit status 64 (EX_USAGE).
struct UsageError: Error {
    let message: String
}

struct Arguments {
    var command: String
    var options: [String: String] = [:]
    var flags: Set<String> = []
    var positionals: [String] = []

    static let valued: Set<String> = ["--config", "--device", "--lat", "--lon", "--alarm", "--destination", "--limit", "--log-level",
                                      "--serial", "--baud", "--udp", "--tcp", "--gpsd", "--file", "--socket",
                                      "--format", "--since", "--until", "-o"]
    static let allowed: [String: Set<String>] = [
        "run": ["--config", "--log-level"],
        "status": ["--config", "--json", "--watch"],
        "logs": ["--config", "--clear", "--limit"],
        "send": ["--config", "--device", "--lat", "--lon", "--alarm", "--destination"],
        "duty": ["--config", "--destination"],
        "check": ["--config"],
        "export": ["--config", "--format", "--device", "--since", "--until", "-o"],
        "replay": ["--config", "--destination", "--device", "--since", "--until", "--all"],
        "collect": ["--config", "--device", "--serial", "--baud", "--udp", "--tcp", "--gpsd", "--file", "--realtime", "--socket", "--log-level"],
        "token": ["--config", "--destination"],
    ]
    /// Commands that take words as well as options.
    static let takesPositionals: Set<String> = ["duty", "token", "collect"]

    init(_ argv: [String]) throws(UsageError) {
        guard let first = argv.first else { throw UsageError(message: "no command given (try georelay --help)") }
        if first == "--help" || first == "-h" || first == "help" {
            command = "help"
            return
        }
        command = first
        guard let allowed = Self.allowed[command] else { throw UsageError(message: "unknown command '\(command)' (try georelay --help)") }
        var index = 1
        while index < argv.count {
            let arg = argv[index]
            if arg == "--help" || arg == "-h" {
                flags.insert("--help")
                return
            }
            if Self.takesPositionals.contains(command), !arg.hasPrefix("-") || arg == "-" {
                positionals.append(arg)
                index += 1
                continue
            }
            guard allowed.contains(arg) else { throw UsageError(message: "\(command): unknown option '\(arg)'") }
            if Self.valued.contains(arg) {
                guard index + 1 < argv.count else { throw UsageError(message: "\(command): \(arg) needs a value") }
                options[arg] = argv[index + 1]
                index += 2
            } else {
                flags.insert(arg)
                index += 1
            }
        }
    }

    func number(_ name: String) throws(UsageError) -> Double {
        guard let text = options[name] else { throw UsageError(message: "\(command): \(name) is required") }
        guard let value = Double(text), value.isFinite else { throw UsageError(message: "\(command): \(name) '\(text)' is not a number") }
        return value
    }
}

func printError(_ message: String) {
    FileHandle.standardError.write(Data("georelay: \(message)\n".utf8))
}

func loadConfiguration(_ arguments: Arguments) -> Configuration? {
    let path = arguments.options["--config"] ?? "config/georelay.json5"
    if arguments.options["--config"] == nil, !FileManager.default.fileExists(atPath: path) {
        return Configuration()
    }
    do {
        let configuration = try Configuration.load(path: path)
        // `run` logs it (where `georelay logs` shows it too); `check` says it here.
        if arguments.command == "check", let warning = configuration.exposureWarning(path: path) { printError("warning: \(warning)") }
        return configuration
    } catch {
        printError("configuration \(path): \(error)")
        return nil
    }
}

/// A time on the command line: ISO 8601 with a zone, or Unix seconds.
func parseTime(_ text: String?) throws(UsageError) -> Int64? {
    guard let text else { return nil }
    if let ms = Timestamp.milliseconds(fromISO8601: text) { return ms }
    if let seconds = Double(text), let ms = Timestamp.milliseconds(fromUnix: seconds) { return ms }
    throw UsageError(message: "'\(text)' is not ISO 8601 with a zone or Unix seconds")
}

func replay(_ arguments: Arguments, configuration: Configuration) -> Int32 {
    guard let name = arguments.options["--destination"], let destination = configuration.destinations.first(where: { $0.name == name }) else {
        printError("replay: --destination names a destination of the configuration")
        return 64
    }
    let since: Int64, until: Int64?
    do throws(UsageError) {
        guard let start = try parseTime(arguments.options["--since"]) else { throw UsageError(message: "--since is required") }
        since = start
        until = try parseTime(arguments.options["--until"])
    } catch {
        printError("replay: \(error.message)")
        return 64
    }
    do {
        let filter = arguments.flags.contains("--all") ? nil : LocationFilter(settings: destination.filter)
        let report = try Spool.queueReplay(path: configuration.spool.path, destination: name, device: arguments.options["--device"],
                                           sinceMs: since, untilMs: until ?? .max, choose: filter.map { filter in { filter.replayChoice() } })
        print("queued \(report.queued) of \(report.considered) positions for \(name)\(filter == nil ? "" : " (through its filter)")")
        for (device, oldest) in report.evicted {
            print("\(device): nothing before \(Timestamp.iso8601(milliseconds: oldest)) is left in the spool (evicted)")
        }
        return 0
    } catch {
        printError("replay: \(error)")
        return 1
    }
}

func export(_ arguments: Arguments, configuration: Configuration) -> Int32 {
    guard let name = arguments.options["--format"], let format = Exporter.Format(rawValue: name) else {
        printError("export: --format gpx, geojson or csv is required")
        return 64
    }
    let since: Int64?, until: Int64?
    do throws(UsageError) {
        since = try parseTime(arguments.options["--since"])
        until = try parseTime(arguments.options["--until"])
    } catch {
        printError("export: \(error.message)")
        return 64
    }
    do {
        let reader = try SpoolReader.open(path: configuration.spool.path)
        var handle = FileHandle.standardOutput
        if let path = arguments.options["-o"] {
            guard FileManager.default.createFile(atPath: path, contents: nil), let file = FileHandle(forWritingAtPath: path) else {
                printError("export: cannot write \(path)")
                return 1
            }
            handle = file
        }
        let count = try Exporter(format: format, device: arguments.options["--device"], sinceMs: since, untilMs: until)
            .run(reader: reader, to: Exporter.Output(handle: handle))
        if arguments.options["-o"] != nil { print("exported \(count) positions") }
        return 0
    } catch {
        printError("export: \(error)")
        return 1
    }
}

/// Prints one line per destination; exit status 0 only if every one succeeded.
func report(_ what: String, _ body: () async throws -> [(String, String?)]) async -> Int32 {
    do {
        var ok = true
        for (destination, failure) in try await body() {
            if let failure {
                ok = false
                print("\(destination): \(what) failed: \(failure)")
            } else {
                print("\(destination): \(what) done")
            }
        }
        return ok ? 0 : 1
    } catch {
        printError("\(what): \(error)")
        return 1
    }
}

/// The command line. Swift's runtime captures argv in an ELF constructor, which an LD_PRELOAD
/// shim can leave empty (libfaketime does: the clock-jump tests run the relay under it);
/// `/proc/self/cmdline` always has it.
func commandLine() -> [String] {
    if !CommandLine.arguments.isEmpty { return CommandLine.arguments }
    guard let data = FileManager.default.contents(atPath: "/proc/self/cmdline") else { return [] }
    return data.split(separator: 0, omittingEmptySubsequences: false).dropLast().map { String(decoding: $0, as: UTF8.self) }
}

func main() async -> Int32 {
    let arguments: Arguments
    do {
        arguments = try Arguments(Array(commandLine().dropFirst()))
    } catch {
        printError(error.message)
        return 64
    }
    if arguments.command == "help" {
        print(usage)
        return 0
    }
    if arguments.flags.contains("--help") {
        print(commandHelp[arguments.command] ?? usage)
        return 0
    }
    guard let configuration = loadConfiguration(arguments) else { return 78 }

    switch arguments.command {
    case "run":
        var relay = Relay(configuration: configuration, configPath: arguments.options["--config"] ?? (FileManager.default.fileExists(atPath: "config/georelay.json5") ? "config/georelay.json5" : nil))
        if let level = arguments.options["--log-level"] {
            guard let parsed = LogLevel.allCases.first(where: { $0.name == level }) else {
                printError("run: --log-level '\(level)' is not one of error, warning, notice, info, debug")
                return 64
            }
            relay.logLevel = parsed
        }
        do {
            try await relay.run()
            return 0
        } catch {
            printError("\(error)")
            return 1
        }
    case "status":
        if arguments.flags.contains("--watch") {
            // One screen, refreshed in place every two seconds, until interrupted.
            while true {
                let text = (try? StatusReport.load(configuration: configuration).text) ?? "no spool at \(configuration.spool.path) yet\n"
                print("\u{1B}[H\u{1B}[2J" + text, terminator: "")
                fflush(nil)
                sleep(2)
            }
        }
        do {
            let report = try StatusReport.load(configuration: configuration)
            print(arguments.flags.contains("--json") ? report.json.jsonText : report.text, terminator: arguments.flags.contains("--json") ? "\n" : "")
            return 0
        } catch {
            printError("status: \(error)")
            return 1
        }
    case "logs":
        do {
            if arguments.flags.contains("--clear") {
                try Commands.clearLogs(configuration: configuration)
                return 0
            }
            var limit = 10_000
            if let text = arguments.options["--limit"] {
                guard let n = Int(text), n > 0 else {
                    printError("logs: --limit '\(text)' is not a positive whole number")
                    return 64
                }
                limit = n
            }
            print(try Commands.logs(configuration: configuration, limit: limit), terminator: "")
            return 0
        } catch {
            printError("logs: \(error)")
            return 1
        }
    case "send":
        do throws(UsageError) {
            guard let device = arguments.options["--device"], !device.isEmpty else { throw UsageError(message: "send: --device is required") }
            let lat = try arguments.number("--lat")
            let lon = try arguments.number("--lon")
            guard (-90...90).contains(lat) else { throw UsageError(message: "send: --lat \(lat) outside -90...90") }
            guard (-180...180).contains(lon) else { throw UsageError(message: "send: --lon \(lon) outside -180...180") }
            let position = Position(device: device, timeMs: WallClock.nowMs() / 1000 * 1000, lat: lat, lon: lon, alarm: arguments.options["--alarm"])
            do {
                let results = try await Commands.send(position, destination: arguments.options["--destination"], configuration: configuration)
                var ok = true
                for result in results {
                    if case .delivered = result.outcome {
                        print("\(result.destination): delivered")
                    } else {
                        ok = false
                        print("\(result.destination): not delivered, \(result.outcome)")
                    }
                }
                return ok ? 0 : 1
            } catch {
                printError("send: \(error)")
                return 1
            }
        } catch {
            printError(error.message)
            return 64
        }
    case "duty":
        guard arguments.positionals.count == 1, let word = arguments.positionals.first, word == "on" || word == "off" else {
            printError("duty: say 'on' or 'off' (georelay duty on|off [--destination NAME])")
            return 64
        }
        return await report("duty \(word)") {
            try await Commands.duty(on: word == "on", destination: arguments.options["--destination"], configuration: configuration)
        }
    case "collect":
        return collect(arguments, configuration: configuration)
    case "export":
        return export(arguments, configuration: configuration)
    case "replay":
        return replay(arguments, configuration: configuration)
    case "check":
        print(configuration.effective.prettyText())
        return 0
    case "token":
        guard arguments.positionals == ["refresh"] else {
            printError("token: the only action is 'refresh' (georelay token refresh [--destination NAME])")
            return 64
        }
        return await report("token refresh") {
            try await Commands.refreshToken(destination: arguments.options["--destination"], configuration: configuration)
        }
    default:
        printError("unknown command '\(arguments.command)'")
        return 64
    }
}

exit(await main())

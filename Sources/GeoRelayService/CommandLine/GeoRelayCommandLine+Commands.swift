import GeoRelayCollect
import GeoRelayCore

/// Every command, once: the parser, `--help`, the usage errors and the manual's check (docs/operating.md) all read this table.
extension GeoRelayCommandLine {
    package static let commands: [CommandSpec] = [
        CommandSpec(
            name: "run", summary: "run the relay in the foreground (SIGTERM/SIGINT stop, SIGHUP reloads)",
            details: """
                Runs the relay in the foreground: ingest socket, spool, forwarders. SIGTERM or SIGINT stops
                intake, answers what is in flight and closes the spool; SIGHUP re-reads the configuration.
                """,
            options: [
                OptionSpec(
                    "--log-level", .choice(LogLevel.allCases.map(\.name)),
                    help: "the least severe level logged (default info)")
            ],
            work: .async(Commands.runRelay(_:))),
        CommandSpec(
            name: "status", summary: "show delivery state, backlog and counters (works while the relay is down)",
            details: """
                Shows each destination's state, backlog, oldest pending age, last success and error,
                the spool's size against its quota, the ingest counters, the health of the running
                relay's ingest loop and spool writer, and the device health checks (loops, spool,
                disk, clock, sources, links). Reads the spool read-only. With --health only the
                checks, the spool's quick_check included, and the exit status says how the box is:
                0 healthy, 1 degraded, 2 failing (--json: the checks as one JSON object).
                """,
            options: [
                OptionSpec("--json", .flag, help: "one JSON object (keys in docs/operating.md) instead of the screen"),
                OptionSpec("--watch", .flag, help: "redraw the screen every 2 s until interrupted"),
                OptionSpec(
                    "--health", .flag, help: "only the health checks; exit status 0 healthy, 1 degraded, 2 failing"),
            ],
            constraints: [.atMostOne(["--json", "--watch"]), .atMostOne(["--health", "--watch"])],
            work: .async(Commands.status(_:))),
        CommandSpec(
            name: "logs", summary: "print the diagnostic log, oldest first",
            details:
                "Prints the diagnostic log (newest 10,000 entries kept), oldest first, with millisecond timestamps.",
            options: [
                OptionSpec("--clear", .flag, help: "empty the log instead (works while the relay runs)"),
                OptionSpec(
                    "--limit", .positiveInteger(placeholder: "N"), help: "at most the newest N entries (default 10000)"),
            ],
            constraints: [.atMostOne(["--clear", "--limit"])],
            work: .async(Commands.logs(_:))),
        CommandSpec(
            name: "send", summary: "upload one position now, bypassing the spool",
            details: """
                Uploads one position (time: now) straight to the destination(s), bypassing the spool.
                Exit status 0 only when every upload succeeded, 1 otherwise.
                """,
            options: [
                OptionSpec("--device", .text(placeholder: "ID"), help: "the device's id", required: true),
                OptionSpec(
                    "--lat", .number(placeholder: "DEG", range: -90...90), help: "latitude in degrees", required: true),
                OptionSpec(
                    "--lon", .number(placeholder: "DEG", range: -180...180), help: "longitude in degrees",
                    required: true),
                OptionSpec("--alarm", .text(placeholder: "NAME"), help: "an alarm (sos, ...): bypasses every filter"),
                OptionSpec("--destination", .text(placeholder: "NAME"), help: "only this destination (default: all)"),
            ],
            work: .async(Commands.send(_:))),
        CommandSpec(
            name: "replay", summary: "send a window of spooled history to a destination again",
            details: """
                Queues the spooled positions in the window for the destination again (after a server lost them),
                through the destination's filter unless --all. The queue is in the spool, so a relay restart goes on
                with it; the forwarder sends it as history (archive=true for Traccar) when nothing live waits, and
                status shows it as replayPending. Devices whose history no longer reaches back that far are reported.
                TIME is ISO 8601 with a zone or Unix seconds.
                """,
            options: [
                OptionSpec(
                    "--destination", .text(placeholder: "NAME"), help: "a destination of the configuration",
                    required: true),
                OptionSpec("--since", .time, help: "the window's start", required: true),
                OptionSpec("--until", .time, help: "the window's end (default: now)"),
                OptionSpec("--device", .text(placeholder: "ID"), help: "only this device"),
                OptionSpec("--all", .flag, help: "every position in the window, not through the destination's filter"),
            ],
            work: .async(Commands.replay(_:))),
        CommandSpec(
            name: "export", summary: "write spooled history as GPX, GeoJSON or CSV",
            details: """
                Streams the spool's positions, one GPX track (or GeoJSON LineString feature) per device, in fix-time
                order; speed, course and accuracy go in GPX extensions (namespace urn:georelay:gpx:1). TIME is ISO 8601
                with a zone or Unix seconds. Works while the relay runs.
                """,
            options: [
                OptionSpec(
                    "--format", .choice(Exporter.Format.allCases.map(\.rawValue)), help: "the file format",
                    required: true),
                OptionSpec("--device", .text(placeholder: "ID"), help: "only this device"),
                OptionSpec("--since", .time, help: "positions from this time"),
                OptionSpec("--until", .time, help: "positions up to this time"),
                OptionSpec("-o", .text(placeholder: "FILE"), help: "write to FILE (default: standard output)"),
            ],
            work: .blocking(Commands.export(_:))),
        CommandSpec(
            name: "check", summary: "validate a configuration and print the effective values (secrets masked)",
            details: """
                Validates the configuration and prints every effective value, defaults filled in and secrets
                masked, without starting anything. Exit status 0, or 78 (EX_CONFIG) naming the key at fault.
                With --spool, checks the spool file instead: SQLite's quick_check on a read-only connection
                (safe while the relay runs); exit status 0 when sound, 1 with the problems found.
                With --schema, prints the spool file's schema version (0 when there is none yet), the
                newest this relay reads, and the spool's path, on one line: what the package's
                preinst asks the installed relay before it replaces it with another version.
                """,
            options: [
                OptionSpec("--spool", .flag, help: "check the spool file's integrity (quick_check) instead"),
                OptionSpec(
                    "--schema", .flag,
                    help: "print the spool's schema, the newest this relay reads, and the spool's path"),
            ],
            constraints: [.atMostOne(["--spool", "--schema"])],
            work: .blocking(Commands.check(_:))),
        CommandSpec(
            name: "collect", summary: "feed one GPS unit (serial, UDP, TCP, gpsd, a file) into the relay",
            details: """
                Writes one GPS unit's lines (NMEA, JSON, OsmAnd, gpsd TPV) into the relay's socket with acks on,
                keeps what is not acknowledged and resends it when the relay restarts. Serial and TCP sources
                are reopened when they come back. Give exactly one source: --serial, --udp, --tcp, --gpsd, --file
                or - (standard input). With --gpsd, --device may be {path} (gpsd's device path as the id) or
                PATH=ID[,PATH=ID...], or left out. Exit status 0 when a file is done; 1 when the source cannot be opened.
                """,
            options: [
                OptionSpec(
                    "--device", .text(placeholder: "ID"),
                    help: "the id the unit's positions get (required but with --gpsd)"),
                OptionSpec(
                    "--serial", .text(placeholder: "DEVICE"),
                    help: "a serial port (termios raw), reopened when it comes back"),
                OptionSpec(
                    "--baud", .positiveInteger(placeholder: "RATE"), help: "the serial port's rate (default 4800)"),
                OptionSpec(
                    "--udp", .text(placeholder: "[HOST:]PORT"), help: "datagrams sent to this port (often 10110)"),
                OptionSpec("--tcp", .text(placeholder: "HOST:PORT"), help: "a multiplexer, reconnected with backoff"),
                OptionSpec(
                    "--gpsd", .text(placeholder: "[HOST[:PORT]]"), help: "gpsd's JSON reports (port 2947 by default)"),
                OptionSpec("--file", .text(placeholder: "PATH"), help: "a log file, read to its end"),
                OptionSpec("--realtime", .flag, help: "replay the file at its own pace"),
                OptionSpec(
                    "--socket", .text(placeholder: "PATH"),
                    help: "the relay's socket (default: ingest.socket of the configuration)"),
                OptionSpec(
                    "--log-level", .choice(LogLevel.allCases.map(\.name)),
                    help: "the least severe level logged (default info)"),
            ],
            positionals: [PositionalSpec("-", choices: ["-"], help: "read standard input", required: false)],
            constraints: [
                .exactlyOne(["--serial", "--udp", "--tcp", "--gpsd", "--file", "-"], what: "source"),
                .requires("--baud", "--serial"), .requires("--realtime", "--file"),
            ],
            work: .blocking(Commands.collect(_:))),
        CommandSpec(
            name: "duty", summary: "send the on-duty or off-duty event to push destinations",
            details: """
                Sends the DUTY event (on_duty or off_duty) to each push destination, or the named one,
                with the current token (getting one first in login mode). Exit status 0 only on 2xx.
                """,
            options: [
                OptionSpec(
                    "--destination", .text(placeholder: "NAME"), help: "only this push destination (default: all)")
            ],
            positionals: [PositionalSpec("duty", choices: ["on", "off"], help: "the event: on_duty or off_duty")],
            work: .async(Commands.duty(_:))),
        CommandSpec(
            name: "token", summary: "refresh a push destination's token now (login mode)",
            details: """
                Gets a new token now for each push destination in login mode, or the named one, and stores it
                (mode 0600, beside the spool) where the running relay picks it up.
                """,
            options: [
                OptionSpec(
                    "--destination", .text(placeholder: "NAME"), help: "only this push destination (default: all)")
            ],
            positionals: [PositionalSpec("action", choices: ["refresh"], help: "the only action")],
            work: .async(Commands.refreshToken(_:))),
    ]
}

import GeoRelayTestTraits
import Testing

@testable import GeoRelayService

/// The parser, on the real command table: what `georelay <command> ...` accepts and how it refuses.
@Suite(.offThePool) struct CommandSpecParseTests {
    func spec(_ name: String) throws -> CommandSpec {
        try #require(GeoRelayCommandLine.command(named: name), "no command \(name)")
    }

    func parse(_ command: String, _ arguments: [String]) throws -> ParsedArguments {
        try spec(command).parse(arguments)
    }

    /// The error `arguments` give, or nil when they parse.
    func error(_ command: String, _ arguments: [String]) throws -> UsageError? {
        let spec = try spec(command)
        do throws(UsageError) {
            _ = try spec.parse(arguments)
            return nil
        } catch {
            return error
        }
    }

    @Test func equalsFormAndSeparateValueParseAlike() throws {
        let split = try parse(
            "replay", ["--destination", "traccar", "--since", "1700000000", "--device", "boat", "--all"])
        let joined = try parse("replay", ["--destination=traccar", "--since=1700000000", "--device=boat", "--all"])
        #expect(split == joined)
        #expect(joined.requiredText("--destination") == "traccar")
        #expect(joined.requiredTime("--since") == 1_700_000_000_000)
        #expect(joined.text("--device") == "boat")
        #expect(joined.flag("--all"))
        #expect(joined.time("--until") == nil)
        // Only the first `=` splits: the value keeps the rest.
        #expect(try parse("send", ["--device=a=b", "--lat=1", "--lon=2"]).requiredText("--device") == "a=b")
    }

    @Test func aValueMayStartWithOneDashAndWithTwoThroughEquals() throws {
        let parsed = try parse("send", ["--device", "x", "--lat", "-33.9", "--lon=-70.6"])
        #expect(parsed.requiredNumber("--lat") == -33.9)
        #expect(parsed.requiredNumber("--lon") == -70.6)
        #expect(try parse("send", ["--device=--odd", "--lat", "1", "--lon", "2"]).requiredText("--device") == "--odd")
        #expect(try parse("export", ["--format", "csv", "-o", "-"]).text("-o") == "-")
    }

    @Test(arguments: [
        ("logs", ["--limit", "1", "--limit", "2"], "--limit given more than once"),
        ("logs", ["--limit=1", "--limit", "1"], "--limit given more than once"),
        ("replay", ["--all", "--destination", "a", "--since", "1", "--all"], "--all given more than once"),
    ])
    func aRepeatedOptionIsAUsageError(command: String, arguments: [String], message: String) throws {
        let error = try #require(try error(command, arguments), "\(arguments) parsed")
        #expect(error == UsageError(command: command, message))
        #expect(error.description == "\(command): \(message) (try georelay \(command) --help)")
    }

    @Test func anUnknownOptionIsNamedWithItsCommand() throws {
        #expect(try error("status", ["--bogus"]) == UsageError(command: "status", "unknown option '--bogus'"))
        #expect(try error("status", ["--bogus=1"]) == UsageError(command: "status", "unknown option '--bogus'"))
        // An option of another command is still unknown here.
        #expect(try error("check", ["--all"]) == UsageError(command: "check", "unknown option '--all'"))
        #expect(try error("logs", ["-x"]) == UsageError(command: "logs", "unknown option '-x'"))
    }

    @Test(arguments: [
        ("logs", ["--limit"], "--limit needs a value (N)"),
        ("logs", ["--limit="], "--limit needs a value (N), not an empty one"),
        // The next option is not taken as the value.
        ("send", ["--device", "--lat", "1", "--lon", "2"], "--device needs a value (ID)"),
        ("export", ["--format"], "--format needs a value (gpx|geojson|csv)"),
        ("status", ["--json=yes"], "--json takes no value"),
    ])
    func aMissingOrUnwantedValueIsAUsageError(command: String, arguments: [String], message: String) throws {
        #expect(try error(command, arguments) == UsageError(command: command, message))
    }

    @Test(arguments: [
        ("logs", ["--limit", "abc"], "--limit 'abc' is not a positive whole number"),
        ("logs", ["--limit", "0"], "--limit '0' is not a positive whole number"),
        ("logs", ["--limit", "2.5"], "--limit '2.5' is not a positive whole number"),
        ("send", ["--device", "x", "--lat", "north", "--lon", "1"], "--lat 'north' is not a number"),
        ("send", ["--device", "x", "--lat", "91", "--lon", "1"], "--lat '91' is not within -90...90"),
        ("send", ["--device", "x", "--lat", "1", "--lon", "-180.5"], "--lon '-180.5' is not within -180...180"),
        ("send", ["--device", "x", "--lat", "nan", "--lon", "1"], "--lat 'nan' is not a number"),
        (
            "replay", ["--destination", "a", "--since", "yesterday"],
            "--since 'yesterday' is not a time (ISO 8601 with a zone, or Unix seconds)"
        ),
        ("export", ["--format", "kml"], "--format 'kml' is not one of gpx, geojson, csv"),
        ("run", ["--log-level", "loud"], "--log-level 'loud' is not one of error, warning, notice, info, debug"),
        (
            "collect", ["--device", "x", "--serial", "/dev/ttyS0", "--baud", "fast"],
            "--baud 'fast' is not a positive whole number"
        ),
    ])
    func aValueOfTheWrongKindIsAUsageErrorNamingIt(command: String, arguments: [String], message: String) throws {
        #expect(try error(command, arguments) == UsageError(command: command, message))
    }

    @Test func valuesArriveTyped() throws {
        #expect(try parse("logs", ["--limit", "25"]).integer("--limit") == 25)
        #expect(
            try parse("replay", ["--destination", "a", "--since", "2026-07-25T04:30:05Z"]).requiredTime("--since")
                == 1_784_953_805_000)
        #expect(try parse("run", ["--log-level", "debug"]).text("--log-level") == "debug")
        #expect(try parse("status", []).flag("--json") == false)
    }

    @Test func aRequiredOptionOrWordMustBeThere() throws {
        #expect(
            try error("send", ["--device", "x", "--lon", "1"]) == UsageError(command: "send", "--lat DEG is required"))
        #expect(try error("export", []) == UsageError(command: "export", "--format gpx|geojson|csv is required"))
        #expect(try error("duty", []) == UsageError(command: "duty", "missing on|off"))
        #expect(try error("token", ["--destination", "gw"]) == UsageError(command: "token", "missing refresh"))
    }

    @Test func wordsAreCheckedAgainstTheirChoices() throws {
        #expect(try parse("duty", ["off", "--destination", "gw"]).requiredWord("duty") == "off")
        #expect(try parse("token", ["refresh"]).requiredWord("action") == "refresh")
        #expect(try error("duty", ["sideways"]) == UsageError(command: "duty", "'sideways' is not one of on, off"))
        #expect(try error("token", ["renew"]) == UsageError(command: "token", "'renew' is not 'refresh'"))
        #expect(try error("token", ["refresh", "now"]) == UsageError(command: "token", "unexpected argument 'now'"))
        #expect(try error("status", ["now"]) == UsageError(command: "status", "unexpected argument 'now'"))
        // `-` is a word (standard input), and after `--` everything is.
        #expect(try parse("collect", ["--device", "x", "-"]).positional("-") == "-")
        #expect(try error("duty", ["--", "--help"]) == UsageError(command: "duty", "'--help' is not one of on, off"))
    }

    @Test func constraintsOverSeveralOptions() throws {
        #expect(
            try error("status", ["--json", "--watch"])
                == UsageError(command: "status", "--json and --watch cannot be combined"))
        #expect(
            try error("status", ["--health", "--watch"])
                == UsageError(command: "status", "--health and --watch cannot be combined"))
        #expect(
            try error("logs", ["--clear", "--limit", "3"])
                == UsageError(command: "logs", "--clear and --limit cannot be combined"))
        #expect(
            try error("collect", ["--device", "x"])
                == UsageError(command: "collect", "give a source: --serial, --udp, --tcp, --gpsd, --file or -"))
        #expect(
            try error("collect", ["--device", "x", "--udp", "1", "-"])
                == UsageError(command: "collect", "give one source, not --udp and -"))
        #expect(
            try error("collect", ["--device", "x", "--udp", "1", "--baud", "9600"])
                == UsageError(command: "collect", "--baud only goes with --serial"))
        #expect(
            try error("collect", ["--device", "x", "-", "--realtime"])
                == UsageError(command: "collect", "--realtime only goes with --file"))
    }

    @Test func helpAnywhereWinsOverEveryOtherCheck() throws {
        #expect(try parse("send", ["--bogus", "--lat", "north", "--help"]).wantsHelp)
        #expect(try parse("duty", ["-h"]).wantsHelp)
        #expect(try parse("logs", []).wantsHelp == false)
    }

    @Test func everyCommandsHelpComesFromItsDescription() throws {
        for command in GeoRelayCommandLine.commands {
            let help = command.help
            #expect(help.hasPrefix("usage: georelay \(command.name)"), "\(command.name)")
            for option in command.options {
                #expect(
                    help.contains(option.name) && help.contains(option.help),
                    "\(command.name) --help lacks \(option.name)")
            }
            for positional in command.positionals {
                #expect(
                    help.contains(positional.choices.joined(separator: "|")),
                    "\(command.name) --help lacks \(positional.name)")
            }
        }
        #expect(
            try spec("send").usageLine
                == "usage: georelay send --device ID --lat DEG --lon DEG [--alarm NAME] [--destination NAME] [--config PATH]"
        )
        #expect(try spec("duty").usageLine == "usage: georelay duty on|off [--destination NAME] [--config PATH]")
        #expect(try spec("collect").usageLine.hasSuffix("[--config PATH] [-]"))
        #expect(try spec("status").usageLine == "usage: georelay status [--json | --watch] [--health] [--config PATH]")
        #expect(try spec("logs").usageLine == "usage: georelay logs [--clear | --limit N] [--config PATH]")
    }
}

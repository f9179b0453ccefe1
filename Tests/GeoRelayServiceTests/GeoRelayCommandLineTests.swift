import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayService

/// A temporary directory whose two files stand in for the terminal; removed at the end.
final class ConsoleFiles {
    let directory: String
    let console: Console

    init() throws {
        var template = Array("/tmp/grcli.XXXXXX".utf8CString)
        directory = String(cString: template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!)! })
        console = Console(
            standardOutput: try FileOutput(creatingAt: "\(directory)/out"),
            standardError: try FileOutput(creatingAt: "\(directory)/err"))
    }

    var stdout: String { (try? String(contentsOfFile: "\(directory)/out", encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: "\(directory)/err", encoding: .utf8)) ?? "" }

    /// Runs `georelay <arguments>` in-process and returns its exit code.
    func run(_ arguments: [String]) async -> ExitCode {
        await GeoRelayCommandLine.run(arguments, console: console)
    }

    deinit {
        console.standardOutput.close()
        console.standardError.close()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

@Suite(.offThePool) struct GeoRelayCommandLineTests {
    @Test func exitCodesAreTheSysexitsValues() {
        #expect(ExitCode.allCases.map(\.rawValue) == [0, 1, 2, 64, 78])
        #expect(ExitCode.usage.rawValue == 64) // EX_USAGE
        #expect(ExitCode.configuration.rawValue == 78) // EX_CONFIG
    }

    @Test func helpListsEveryCommandAndExitsZero() async throws {
        for arguments in [["--help"], ["-h"], ["help"]] {
            let files = try ConsoleFiles()
            #expect(await files.run(arguments) == .success)
            for command in GeoRelayCommandLine.commands {
                #expect(files.stdout.contains("\n  \(command.name) "), "georelay \(arguments[0]) lacks \(command.name)")
            }
            #expect(files.stdout.contains("64  usage error"))
            #expect(files.stderr.isEmpty)
        }
    }

    @Test func eachCommandsHelpExitsZeroWithoutReadingTheConfiguration() async throws {
        for command in GeoRelayCommandLine.commands {
            let files = try ConsoleFiles()
            // The configuration named does not exist: help must not need it.
            #expect(
                await files.run([command.name, "--config", "\(files.directory)/missing.json5", "--help"]) == .success)
            #expect(files.stdout == command.help)
            let other = try ConsoleFiles()
            #expect(await other.run(["help", command.name]) == .success)
            #expect(other.stdout == command.help)
        }
    }

    @Test(arguments: [
        ([String](), "georelay: no command given (try georelay --help)"),
        (["frobnicate"], "georelay: unknown command 'frobnicate' (try georelay --help)"),
        (["help", "frobnicate"], "georelay: help takes one command's name, not 'frobnicate' (try georelay --help)"),
        (
            ["logs", "--limit", "abc"],
            "georelay: logs: --limit 'abc' is not a positive whole number (try georelay logs --help)"
        ),
        (
            ["logs", "--limit=3", "--limit=4"],
            "georelay: logs: --limit given more than once (try georelay logs --help)"
        ),
        (["status", "--bogus"], "georelay: status: unknown option '--bogus' (try georelay status --help)"),
    ])
    func usageErrorsExit64WithOneLine(arguments: [String], message: String) async throws {
        let files = try ConsoleFiles()
        #expect(await files.run(arguments) == .usage)
        #expect(files.stderr == message + "\n")
        #expect(files.stdout.isEmpty)
    }

    @Test func aBadConfigurationExits78NamingTheKeyAfterTheArgumentsParsed() async throws {
        let files = try ConsoleFiles()
        let path = "\(files.directory)/bad.json5"
        try "{ spool: { maxBytes: 'lots' } }".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(await files.run(["check", "--config", path]) == .configuration)
        #expect(files.stderr.contains("configuration \(path): "))
        #expect(files.stderr.contains("spool.maxBytes: expected a number"))
        // A usage error is found first: the arguments are parsed before the file is read.
        let again = try ConsoleFiles()
        #expect(await again.run(["check", "--config", path, "--bogus"]) == .usage)
        // A named file that does not exist is a configuration error, not built-in defaults.
        let missing = try ConsoleFiles()
        #expect(await missing.run(["check", "--config=\(files.directory)/nowhere.json5"]) == .configuration)
    }

    @Test func aDestinationTheConfigurationLacksIsAUsageError() async throws {
        let files = try ConsoleFiles()
        let path = "\(files.directory)/georelay.json5"
        try
            "{ spool: { path: '\(files.directory)/spool.db' }, destinations: [{ name: 'traccar', url: 'http://127.0.0.1:1' }] }"
            .write(toFile: path, atomically: true, encoding: .utf8)
        #expect(await files.run(["replay", "--config", path, "--destination", "nowhere", "--since", "0"]) == .usage)
        #expect(
            files.stderr.contains("replay: --destination 'nowhere' is not a destination of the configuration (traccar)")
        )
        let send = try ConsoleFiles()
        #expect(
            await send.run([
                "send", "--config", path, "--destination", "nowhere", "--device", "x", "--lat", "1", "--lon", "2",
            ]) == .usage)
        #expect(send.stderr.contains("send: --destination 'nowhere'"))
        let duty = try ConsoleFiles()
        #expect(await duty.run(["duty", "on", "--config", path, "--destination", "traccar"]) == .usage)
        #expect(duty.stderr.contains("duty: --destination 'traccar' is not a push destination"))
    }

    @Test func aCommandThatFailsExitsOneWithItsName() async throws {
        let files = try ConsoleFiles()
        let path = "\(files.directory)/georelay.json5"
        try "{ spool: { path: '\(files.directory)/no-such-dir/spool.db' } }".write(
            toFile: path, atomically: true, encoding: .utf8)
        #expect(await files.run(["logs", "--config", path]) == .failure)
        #expect(files.stderr.hasPrefix("georelay: logs: "))
    }

    /// Starts `status --watch` on a spool that does not exist yet, waits for `screens` screens
    /// (at most 120 s: under `make test` other suites can hold the cooperative pool's two threads
    /// for tens of seconds before the watch's task first runs), cancels it and says whether it
    /// ended within 60 s.
    func watchEndsWhenCancelled(every interval: Duration, after screens: Int) async throws -> Bool {
        let files = try ConsoleFiles()
        var configuration = Configuration()
        configuration.spool.path = "\(files.directory)/no-spool-yet.db"
        let watch = Task { [configuration, console = files.console] in
            try await Commands.watchStatus(configuration: configuration, console: console, every: interval)
        }
        let clear = "\u{1B}[H\u{1B}[2J"
        let deadline = ContinuousClock.now + .seconds(120)
        while files.stdout.components(separatedBy: clear).count <= screens, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10)) // polling a file another task writes: no event to await
        }
        #expect(files.stdout.components(separatedBy: clear).count > screens, "\(screens) screens within 120 s")
        #expect(files.stdout.contains("no spool at \(configuration.spool.path) yet"))
        watch.cancel()
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { (try? await watch.value) == nil }
            group.addTask {
                try? await Task.sleep(for: .seconds(60))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    @Test func statusWatchRedrawsUntilCancelled() async throws {
        #expect(
            try await watchEndsWhenCancelled(every: .milliseconds(20), after: 3),
            "the watch did not end within 60 s of being cancelled")
    }

    /// The wait between screens holds no thread: cancelled an hour before its next screen,
    /// the watch ends at once, where a blocking sleep would hold its thread for the hour.
    @Test func statusWatchWaitsWithoutBlockingAThread() async throws {
        #expect(
            try await watchEndsWhenCancelled(every: .seconds(3600), after: 1),
            "the watch's wait did not end within 60 s of being cancelled")
    }

    /// The manual's command table (docs/operating.md) and the parser agree: every command has a row, every row
    /// is a command, and every option a command takes is in its row (`--config` is said once for all).
    @Test func theManualDescribesEveryCommandAndOptionTheParserKnows() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("docs/operating.md"), encoding: .utf8)
        // An escaped `\|` inside a cell (`--json \| --watch`) is not a column.
        let rows = readme.replacingOccurrences(of: "\\|", with: "/").split(separator: "\n").filter {
            $0.hasPrefix("| `georelay ")
        }
        let documented = rows.compactMap {
            $0.dropFirst("| `georelay ".count).split(whereSeparator: { $0 == " " || $0 == "`" }).first.map(String.init)
        }
        #expect(documented.sorted() == GeoRelayCommandLine.commands.map(\.name).sorted())
        for command in GeoRelayCommandLine.commands {
            guard let row = rows.first(where: { $0.hasPrefix("| `georelay \(command.name)") }) else { continue }
            for option in command.options where option.name != OptionSpec.configuration.name {
                #expect(
                    row.contains("`\(option.name)") || row.contains(" \(option.name) ")
                        || row.contains("[\(option.name)"),
                    "docs/operating.md's row for \(command.name) does not mention \(option.name)")
            }
            // The synopsis cell names no option the parser would refuse.
            let synopsis = row.split(separator: "|", omittingEmptySubsequences: false)[1]
            for word in synopsis.split(whereSeparator: { " `[]".contains($0) })
            where word.hasPrefix("-") && word.count > 1 {
                #expect(
                    command.option(named: String(word)) != nil,
                    "docs/operating.md's \(command.name) synopsis has \(word), which the parser does not know")
            }
        }
        #expect(readme.contains("\(OptionSpec.configuration.name) PATH"))
        for code in ExitCode.allCases {
            #expect(
                readme.contains("| \(code.rawValue) |"), "docs/operating.md's exit status table lacks \(code.rawValue)")
        }
    }
}

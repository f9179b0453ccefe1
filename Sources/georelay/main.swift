import FoundationEssentials
import GeoRelayCore
import GeoRelayService
import Glibc

// The thin executable: argv and the terminal in, an exit status out. Every command,
// its options, its help and its work are in GeoRelayService (GeoRelayCommandLine).

/// The command line. Swift's runtime captures argv in an ELF constructor, which an LD_PRELOAD
/// shim can leave empty (libfaketime does: the clock-jump tests run the relay under it);
/// `/proc/self/cmdline` always has it.
func commandLine() -> [String] {
    if !CommandLine.arguments.isEmpty { return CommandLine.arguments }
    guard let data = FileManager.default.contents(atPath: "/proc/self/cmdline") else { return [] }
    return data.split(separator: 0, omittingEmptySubsequences: false).dropLast().map {
        String(decoding: $0, as: UTF8.self)
    }
}

let terminal = Console(standardOutput: .standardOutput, standardError: .standardError)
exit(await GeoRelayCommandLine.run(Array(commandLine().dropFirst()), console: terminal).rawValue)

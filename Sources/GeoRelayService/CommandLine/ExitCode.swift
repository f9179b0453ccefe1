/// Every exit status georelay's commands end with, in one place.
///
/// The values follow BSD's `sysexits.h` where it has a name for the case, so scripts
/// and systemd (`RestartPreventExitStatus=78`) can tell a mistake on the command line
/// or in the configuration, which retrying cannot fix, from a failure that may pass.
package enum ExitCode: Int32, Sendable, CaseIterable {
    /// The command did what it was asked (every upload delivered, the file written, ...).
    case success = 0
    /// The command ran and did not succeed: an upload was refused or unanswered, the spool
    /// could not be read, a collector's source could not be opened, the daemon stopped on an error.
    case failure = 1
    /// `georelay status --health` only: the box is failing (there 1 means degraded, 0 healthy),
    /// so a script can tell "look at it" from "it is losing positions".
    case unhealthy = 2
    /// `EX_USAGE`: the command line is wrong (unknown command or option, a missing or
    /// malformed value, a repeated option); the message names the option and the command.
    case usage = 64
    /// `EX_CONFIG`: the configuration file cannot be read or is invalid; the message names the key.
    case configuration = 78

    /// One line per status, for `georelay --help` and docs/operating.md.
    package var meaning: String {
        switch self {
        case .success: "success"
        case .failure:
            "the command ran and failed (an upload refused, the spool unreadable, ...); status --health: degraded"
        case .unhealthy: "status --health: failing"
        case .usage: "usage error (EX_USAGE)"
        case .configuration: "configuration error (EX_CONFIG)"
        }
    }
}

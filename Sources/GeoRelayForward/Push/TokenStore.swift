import FoundationEssentials
import GeoRelayCore
import Glibc

/// A bearer token with what the relay knows about it.
package struct PushToken: Sendable, Equatable {
    package var value: String
    package var obtainedMs: Int64
    /// When the server said it expires (`expiresIn`), if it did.
    package var expiresMs: Int64?
    /// Whether the driver's login went through with it.
    package var loggedIn: Bool
    /// The machine's boot and its monotonic clock when the token was obtained: after a restart
    /// in the same boot, the token's age comes from them, not from the wall clock, which may have
    /// been stepped since (an hour back would otherwise have the relay push with it an hour past
    /// its expiry).
    package var obtainedOn: BootTime? = nil

    /// A reading of the machine's monotonic clock, with the boot it counts from.
    package struct BootTime: Sendable, Equatable {
        package var boot: String
        package var monotonicMs: Int64
    }

    /// The token with its times moved onto `clock`'s schedule (`now`): its age taken from the
    /// monotonic clock when it was obtained in this boot; as it is otherwise.
    package func rebased(now: Int64, clock: any RelayClock) -> PushToken {
        guard let obtainedOn, obtainedOn.boot == clock.bootID() else { return self }
        let age = clock.monotonicMs().saturatingMinus(obtainedOn.monotonicMs)
        guard age >= 0 else { return self }
        let shift = now.saturatingMinus(age).saturatingMinus(obtainedMs)
        var token = self
        token.obtainedMs = obtainedMs.saturatingPlus(shift)
        token.expiresMs = expiresMs.map { $0.saturatingPlus(shift) }
        return token
    }
}

/// The token on disk (mode 0600) beside the spool, so a restart does not cost
/// an authentication round trip on a metered link, and `georelay token refresh`
/// can hand a fresh token to the running daemon.
package struct TokenStore: Sendable {
    package let path: String

    /// `<spool directory>/<destination>.token`.
    package init(spoolPath: String, destination: String) {
        let directory = Paths.directory(of: spoolPath)
        path = (directory.isEmpty ? "." : directory) + "/\(destination).token"
    }

    /// The file's modification time, to notice a token written by another process.
    package func modified() -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_mtim.tv_sec).multipliedReportingOverflow(by: 1000).partialValue.saturatingPlus(
            Int64(info.st_mtim.tv_nsec) / 1_000_000)
    }

    package func load() -> PushToken? {
        guard let data = FileManager.default.contents(atPath: path),
            case .object(let object)? = try? JSONParser.parse(String(decoding: data, as: UTF8.self)),
            case .string(let value)? = object["accessToken"], !value.isEmpty,
            case .number(let obtainedNumber)? = object["obtainedMs"],
            let obtained = CheckedNumbers.int64(obtainedNumber)
        else { return nil }
        // A time that does not fit (1e19, 1e400 in a file somebody edited) makes the file unreadable,
        // as any other unreadable token is: a new one is fetched. `Int64(_:)` trapped on it.
        var expires: Int64?
        if case .number(let e)? = object["expiresMs"] {
            guard let checked = CheckedNumbers.int64(e) else { return nil }
            expires = checked
        }
        let loggedIn = object["loggedIn"] == .bool(true)
        var token = PushToken(value: value, obtainedMs: obtained, expiresMs: expires, loggedIn: loggedIn)
        if case .string(let boot)? = object["boot"], case .number(let number)? = object["obtainedMonotonicMs"],
            let monotonic = CheckedNumbers.int64(number), monotonic >= 0
        {
            token.obtainedOn = PushToken.BootTime(boot: boot, monotonicMs: monotonic)
        }
        return token
    }

    /// Writes atomically with mode 0600 from the start: the token is never world-readable, even briefly.
    ///
    /// Durable when it returns: the data is fsynced before the rename and the directory after
    /// it, since a rename lives in the directory and a power cut undoes one not yet synced there
    /// (`PowerCutTests` lost every token that way; each restart after a cut logged in again).
    /// A short write is finished, not taken for the whole token.
    package func save(_ token: PushToken) throws(SystemError) {
        let object = JSONObject([
            ("accessToken", .string(token.value)),
            ("obtainedMs", .number(Double(token.obtainedMs))),
            ("expiresMs", token.expiresMs.map { .number(Double($0)) } ?? .null),
            ("loggedIn", .bool(token.loggedIn)),
            ("boot", token.obtainedOn.map { .string($0.boot) } ?? .null),
            ("obtainedMonotonicMs", token.obtainedOn.map { .number(Double($0.monotonicMs)) } ?? .null),
        ])
        let temporary = path + ".tmp"
        let file = try FileDescriptor.open(temporary, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
        let bytes = Array(JSONValue.object(object).jsonText.utf8)
        try file.writeAll(bytes, context: temporary)
        // Renaming data that may not be on the disk could replace a good token with an empty file.
        try syscall("fsync", temporary) { fsync(file.number) }
        try file.close()
        fchmodat(AT_FDCWD, temporary, 0o600, 0)
        try syscall("rename", path) { rename(temporary, path) }
        let directory = Paths.directory(of: path)
        let folder = try FileDescriptor.open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY)
        try syscall("fsync", directory) { fsync(folder.number) }
    }

    package func remove() {
        unlink(path)
    }
}

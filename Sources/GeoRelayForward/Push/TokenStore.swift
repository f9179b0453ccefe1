import Foundation
import GeoRelayCore

/// A bearer token with what the relay knows about it.
package struct PushToken: Sendable, Equatable {
    package var value: String
    package var obtainedMs: Int64
    /// When the server said it expires (`expiresIn`), if it did.
    package var expiresMs: Int64?
    /// Whether the driver's login went through with it.
    package var loggedIn: Bool
}

/// The token on disk (mode 0600) beside the spool, so a restart does not cost
/// an authentication round trip on a metered link, and `georelay token refresh`
/// can hand a fresh token to the running daemon.
package struct TokenStore: Sendable {
    package let path: String

    /// `<spool directory>/<destination>.token`.
    package init(spoolPath: String, destination: String) {
        let directory = (spoolPath as NSString).deletingLastPathComponent
        path = (directory.isEmpty ? "." : directory) + "/\(destination).token"
    }

    /// The file's modification time, to notice a token written by another process.
    package func modified() -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_mtim.tv_sec) * 1000 + Int64(info.st_mtim.tv_nsec) / 1_000_000
    }

    package func load() -> PushToken? {
        guard let data = FileManager.default.contents(atPath: path),
              case .object(let object)? = try? JSONParser.parse(String(decoding: data, as: UTF8.self)),
              case .string(let value)? = object["accessToken"], !value.isEmpty,
              case .number(let obtained)? = object["obtainedMs"] else { return nil }
        var expires: Int64?
        if case .number(let e)? = object["expiresMs"] { expires = Int64(e) }
        let loggedIn = object["loggedIn"] == .bool(true)
        return PushToken(value: value, obtainedMs: Int64(obtained), expiresMs: expires, loggedIn: loggedIn)
    }

    /// Writes atomically with mode 0600 from the start: the token is never world-readable, even briefly.
    ///
    /// Durable when it returns: the data is fsynced before the rename and the directory after
    /// it, since a rename lives in the directory and a power cut undoes one not yet synced there
    /// (`PowerCutTests` lost every token that way; each restart after a cut logged in again).
    package func save(_ token: PushToken) throws {
        let object = JSONObject([
            ("accessToken", .string(token.value)),
            ("obtainedMs", .number(Double(token.obtainedMs))),
            ("expiresMs", token.expiresMs.map { .number(Double($0)) } ?? .null),
            ("loggedIn", .bool(token.loggedIn)),
        ])
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SystemError(call: "open", errno: errno, context: temporary) }
        let bytes = Array(JSONValue.object(object).jsonText.utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let writeError = errno
        let synced = fsync(fd) == 0
        let syncError = errno
        close(fd)
        guard written == bytes.count else { throw SystemError(call: "write", errno: writeError, context: temporary) }
        // Renaming data that may not be on the disk could replace a good token with an empty file.
        guard synced else { throw SystemError(call: "fsync", errno: syncError, context: temporary) }
        fchmodat(AT_FDCWD, temporary, 0o600, 0)
        guard rename(temporary, path) == 0 else { throw SystemError(call: "rename", errno: errno, context: path) }
        let directory = (path as NSString).deletingLastPathComponent
        let directoryFD = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else { throw SystemError(call: "open", errno: errno, context: directory) }
        defer { close(directoryFD) }
        guard fsync(directoryFD) == 0 else { throw SystemError(call: "fsync", errno: errno, context: directory) }
    }

    package func remove() {
        unlink(path)
    }
}

import CLinux
import Glibc
import Synchronization

/// The few things the relay took from Foundation that FoundationEssentials does not have: a named
/// thread, a blocking sleep, whitespace trimming, a path's directory and normal form. Foundation
/// itself brings ICU (34 MB of Unicode tables) into the binary for nothing the relay uses, and the
/// package is downloaded over the users' satellite link.

/// Runs `body` on a thread of its own, named for `top -H` and crash reports (at most 15 bytes of
/// the name are kept, the kernel's limit). The thread is detached: it ends when `body` returns.
package func startThread(named name: String, _ body: @escaping @Sendable () -> Void) {
    final class Start: Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
        /// The longest prefix of whole characters that fits the kernel's 15 bytes.
        var kernelName: String {
            var kept = ""
            for character in name where kept.utf8.count + String(character).utf8.count <= 15 { kept.append(character) }
            return kept
        }
    }
    let start = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
    var thread = pthread_t()
    let created = pthread_create(
        &thread, nil,
        { argument in
            let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
            georelay_name_this_thread(start.kernelName)
            start.body()
            return nil
        }, start)
    // Only a process out of threads or memory gets here: nothing can go on without the thread.
    precondition(created == 0, "pthread_create failed (\(created)) for \(name)")
    pthread_detach(thread)
}

/// Blocks the calling thread for `seconds` (for threads of their own, never the shared pool).
package func sleepBlocking(seconds: Double) {
    guard seconds > 0, seconds.isFinite else { return }
    let whole = min(seconds, 86_400).rounded(.down)
    var request = timespec(tv_sec: Int(whole), tv_nsec: Int((min(seconds, 86_400) - whole) * 1e9))
    var remaining = timespec()
    while nanosleep(&request, &remaining) == -1, errno == EINTR { request = remaining }
}

extension String {
    /// Exactly `width` characters: cut, or filled out with spaces (a column of a table).
    package func padded(to width: Int) -> String {
        count >= width ? String(prefix(max(0, width))) : self + String(repeating: " ", count: width - count)
    }
}

extension StringProtocol {
    /// Without leading and trailing whitespace and line breaks.
    package var trimmingWhitespace: String {
        String(drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }
}

/// Paths as strings, as the relay names its files.
package enum Paths {
    /// Everything before the last component: `/a/b/c` → `/a/b`, `/c` → `/`, `c` → `` (trailing
    /// slashes ignored), as `NSString.deletingLastPathComponent` gives it.
    package static func directory(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        var directory = trimmed[..<slash]
        while directory.count > 1, directory.hasSuffix("/") { directory = directory.dropLast() }
        return String(directory)
    }

    /// An absolute path in its plain form: no empty or `.` components, `..` taken back a component
    /// (never above the root), no trailing slash. Symbolic links are left as they are.
    package static func standardized(_ path: String) -> String {
        guard path.hasPrefix("/") else { return path }
        var components: [Substring] = []
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch component {
            case ".": continue
            case "..": _ = components.popLast()
            default: components.append(component)
            }
        }
        return "/" + components.joined(separator: "/")
    }
}

/// What `stat(2)` says of a file: its size and permission bits, or nil when it cannot be examined.
package enum FileStatus {
    package static func size(atPath path: String) -> Int64? {
        status(path).map { Int64($0.st_size) }
    }

    /// The permission bits (`0o640`…).
    package static func permissions(atPath path: String) -> Int? {
        status(path).map { Int($0.st_mode) & 0o7777 }
    }

    private static func status(_ path: String) -> stat? {
        var info = stat()
        return stat(path, &info) == 0 ? info : nil
    }
}

/// Where a command writes: standard output or error, or a file it created. Unbuffered: each
/// write goes whole to the descriptor, so output and messages keep their order.
package final class FileOutput: Sendable {
    private let descriptor: FileDescriptor
    /// The first write that failed: a terminal's is dropped; a file's is reported by `finish`.
    private let failure = Mutex<SystemError?>(nil)

    package static let standardOutput = FileOutput(FileDescriptor(adopting: STDOUT_FILENO))
    package static let standardError = FileOutput(FileDescriptor(adopting: STDERR_FILENO))

    private init(_ descriptor: FileDescriptor) {
        self.descriptor = descriptor
    }

    /// Creates (or empties) the file at `path`, readable by all as an export is.
    package init(creatingAt path: String) throws(SystemError) {
        descriptor = try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode: 0o644)
    }

    /// Writes all of `bytes`; a failure (a closed pipe, a full disk) is kept for `finish`.
    package func write(_ bytes: [UInt8]) {
        do throws(SystemError) {
            try descriptor.writeAll(bytes)
        } catch {
            failure.withLock { $0 = $0 ?? error }
        }
    }

    package func write(_ text: String) {
        write(Array(text.utf8))
    }

    /// Closes a file this output created.
    package func close() {
        try? descriptor.close()
    }

    /// Closes a file this output created, throwing the first write or the close that failed (an
    /// export onto a full card must not say it was written).
    package func finish() throws(SystemError) {
        if let failed = failure.withLock({ $0 }) {
            try? descriptor.close()
            throw failed
        }
        try descriptor.close()
    }
}

/// `1.5`: one decimal, an exact half rounded away from zero as the status page's `toFixed`
/// rounds it, so the page and `georelay status` agree (`%.1f` rounds it to even: 34.25 to 34.2).
package func oneDecimal(_ value: Double) -> String {
    guard value.isFinite, abs(value) < 1e15 else { return "\(value)" }
    let tenths = Int((abs(value) * 10).rounded())
    return "\(value < 0 && tenths > 0 ? "-" : "")\(tenths / 10).\(tenths % 10)"
}

import Foundation
import Glibc

/// Why a machine cannot mount the lazy filesystem: no `/dev/fuse`, no libfuse3 or compiler,
/// or a mount the kernel refused. Tests catch it, say so and skip.
package struct LazyFSUnavailable: Error, CustomStringConvertible {
    package let reason: String
    package var description: String { reason }
}

/// A filesystem that loses, at a power cut, everything not yet made durable: the test kit's
/// `Tests/Helpers/lazyfs/lazyfs.c` (libfuse3), built with the system's C compiler for each
/// instance and mounted on a temporary directory over a backing one.
///
/// Writes and truncations not fsynced, and changes to a directory's names not made durable by
/// an fsync of that directory, live only in the daemon's memory. `cut()` SIGKILLs the daemon:
/// that memory goes, as the page cache does when the power does, and `backing` holds exactly
/// what was fsynced. `remount()` detaches the dead mount and mounts again over the same backing
/// directory, as the machine coming back up. The C source's header says what is modelled and
/// what is not.
///
/// - Important: stop every process using the mount before the value goes; `deinit` unmounts
///   (lazily if busy) and removes both directories.
package final class LazyFS {
    /// Where programs under test read and write.
    package let mountPoint: String
    /// What survives a cut: after `cut()` and until the next mount, exactly the durable state
    /// (the daemon's store of unnamed files, `.lazyfs`, removed).
    package let backing: String
    private let directory: TemporaryDirectory
    private let binary: String
    private var daemon: Process?
    private var stderrPath: String { directory.file("lazyfs.stderr") }

    /// The daemon's process id: SIGKILL to it is the power cut (from any thread; `cut()` does it).
    package private(set) var daemonPID: Int32 = 0
    package private(set) var mounts = 0

    /// Builds the filesystem and mounts it on an empty backing directory.
    /// - Throws: `LazyFSUnavailable` when this machine cannot (the test should skip, saying why);
    ///   anything else is a failure.
    package init() throws {
        guard access("/dev/fuse", R_OK | W_OK) == 0 else {
            throw LazyFSUnavailable(
                reason: "/dev/fuse is missing or not accessible (a container without --device /dev/fuse?)")
        }
        directory = try TemporaryDirectory()
        mountPoint = directory.file("mnt")
        backing = directory.file("disk")
        binary = directory.file("lazyfs")
        for path in [mountPoint, backing] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        }
        try Self.build(into: binary, scratch: directory.path)
        do {
            try mount()
        } catch let error as RelayProcessError {
            throw LazyFSUnavailable(
                reason: "the FUSE mount failed (needs CAP_SYS_ADMIN or fusermount3): \(error.message)")
        }
    }

    /// The C source, beside the other test helpers.
    package static let source: String = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tests/Helpers/lazyfs/lazyfs.c").path

    private static func build(into output: String, scratch: String) throws {
        guard let compiler = ["cc", "clang", "gcc"].lazy.compactMap(executableInPath).first else {
            throw LazyFSUnavailable(reason: "no C compiler (cc, clang or gcc) in PATH to build \(source)")
        }
        guard let pkgConfig = executableInPath("pkg-config") else {
            throw LazyFSUnavailable(reason: "pkg-config is missing (make deps installs it)")
        }
        let flags = try RelayProcess.run(pkgConfig, ["--cflags", "--libs", "fuse3"], directory: scratch)
        guard flags.status == 0 else {
            throw LazyFSUnavailable(
                reason: "libfuse3 is not installed (make deps installs libfuse3-dev and fuse3): \(flags.stderr)")
        }
        let arguments =
            ["-O2", "-Wall", "-o", output, source] + flags.stdout.split(whereSeparator: \.isWhitespace).map(String.init)
        let result = try RelayProcess.run(compiler, arguments, directory: scratch)
        // A source that does not compile is the kit's own bug, not the machine's: fail.
        guard result.status == 0 else {
            throw RelayProcessError(message: "\(compiler) \(source) failed: \(result.stderr)")
        }
    }

    private static func executableInPath(_ name: String) -> String? {
        let path = TestEnvironment.current["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first { access($0, X_OK) == 0 }
    }

    /// Starts the daemon and waits (at most 10 s) until the kernel shows the mount.
    package func mount() throws {
        precondition(daemon == nil, "already mounted")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [backing, mountPoint]
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        process.standardOutput = FileHandle.nullDevice
        try TestEnvironment.launch(process)
        daemon = process
        daemonPID = process.processIdentifier
        let deadline = ContinuousClock.now + .seconds(10)
        while !isMounted() {
            if !process.isRunning {
                daemon = nil
                throw RelayProcessError(
                    message: "lazyfs exited \(process.terminationStatus) before mounting: \(stderrText())")
            }
            guard ContinuousClock.now < deadline else {
                throw RelayProcessError(message: "lazyfs did not mount \(mountPoint) within 10 s: \(stderrText())")
            }
            usleep(5_000) // a child process mounting: no event to await
        }
        mounts += 1
    }

    /// The power cut: the daemon dies with everything not durable. Returns at once; what used
    /// the mount gets errors (ENOTCONN) from then on. `remount()` brings the disk back.
    package func cut() {
        if daemonPID > 0 { kill(daemonPID, SIGKILL) }
    }

    /// After a cut: waits (at most 10 s) for the daemon to be gone, detaches the dead mount,
    /// deletes the files nothing durable named (as fsck does) and mounts again.
    package func remount() throws {
        if let process = daemon {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            try Self.await(process, for: "the killed lazyfs daemon")
            daemon = nil
        }
        try detach(lazily: true)
        let store = "\(backing)/.lazyfs"
        if FileManager.default.fileExists(atPath: store) { try FileManager.default.removeItem(atPath: store) }
        try mount()
    }

    /// A clean unmount: everything becomes durable, as on a shutdown. Waits for the daemon to
    /// finish writing (at most 30 s, then it is killed and the call throws).
    package func unmount() throws {
        guard let process = daemon else { return }
        defer { daemon = nil }
        try detach(lazily: false)
        try Self.await(process, for: "lazyfs to write everything and exit after the unmount", seconds: 30)
    }

    private func detach(lazily: Bool) throws {
        guard isMountedOrDead() else { return }
        var result = try Self.unmountCommand(mountPoint, lazily: lazily)
        if result.status != 0, !lazily {
            // Busy (a process still has a file open): detach now, the daemon finishes when it is released.
            result = try Self.unmountCommand(mountPoint, lazily: true)
        }
        guard result.status == 0 else {
            throw RelayProcessError(message: "cannot unmount \(mountPoint): \(result.stderr)")
        }
    }

    private static func unmountCommand(_ path: String, lazily: Bool) throws -> (
        status: Int32, stdout: String, stderr: String
    ) {
        if let fusermount = executableInPath("fusermount3") {
            return try RelayProcess.run(fusermount, lazily ? ["-u", "-z", path] : ["-u", path], timeout: .seconds(30))
        }
        return try RelayProcess.run("/bin/umount", lazily ? ["-l", path] : [path], timeout: .seconds(30))
    }

    private static func await(_ process: Process, for what: String, seconds: Int = 10) throws {
        guard process.exited(within: .seconds(seconds)) else {
            kill(process.processIdentifier, SIGKILL)
            throw RelayProcessError(message: "waited \(seconds) s for \(what)")
        }
    }

    /// Whether the kernel has a mount at `mountPoint` (a live one: the daemon answers).
    private func isMounted() -> Bool {
        var here = stat()
        var parent = stat()
        guard stat(mountPoint, &here) == 0, stat(directory.path, &parent) == 0 else { return false }
        return here.st_dev != parent.st_dev
    }

    /// Live, or dead after a cut (the kernel answers ENOTCONN for a mount whose daemon is gone).
    private func isMountedOrDead() -> Bool {
        var here = stat()
        if stat(mountPoint, &here) != 0 { return errno == ENOTCONN || errno == ECONNABORTED }
        return isMounted()
    }

    /// The daemon's standard error (one line at each mount; errors when it dies of one).
    package func stderrText() -> String {
        (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
    }

    deinit {
        if let process = daemon {
            try? detach(lazily: false)
            try? Self.await(process, for: "lazyfs to exit", seconds: 30)
        } else if isMountedOrDead() {
            _ = try? Self.unmountCommand(mountPoint, lazily: true)
        }
    }
}

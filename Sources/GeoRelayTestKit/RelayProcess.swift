import Foundation
import GeoRelayCore
import Glibc
import Synchronization

/// The real `georelay` binary, run as a child process on a test's config.
package final class RelayProcess {
    package let process = Process()
    package let configPath: String
    package let socketPath: String
    /// Standard error goes to a file: a pipe nobody drains would block the relay's logging.
    package let stderrPath: String

    /// The binary under test: `GEORELAY_BIN` (set by `make test`), else the debug build.
    package static var binary: String {
        if let path = ProcessInfo.processInfo.environment["GEORELAY_BIN"], !path.isEmpty { return path }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/georelay").path
    }

    /// Starts `georelay run` and waits until its socket accepts connections, for at most
    /// `startTimeout`; throws saying so (with the relay's stderr) when it does not.
    /// - Parameter lab: runs the relay inside the lab's relay-side network namespace
    ///   (`ip netns exec`, which execs it: the pid is the relay's).
    package init(
        configPath: String, socketPath: String, directory: String, arguments: [String] = [],
        environment: [String: String] = [:],
        startTimeout: Duration = .seconds(30), lab: NetworkLab? = nil
    ) throws {
        self.configPath = configPath
        self.socketPath = socketPath
        let command = [Self.binary, "run", "--config", configPath] + arguments
        let launch =
            lab.map { $0.commandOnRelaySide(command) } ?? (
                executable: Self.binary, arguments: Array(command.dropFirst())
            )
        process.executableURL = URL(fileURLWithPath: launch.executable)
        process.arguments = launch.arguments
        if !environment.isEmpty {
            process.environment = TestEnvironment.current.merging(environment) { $1 }
        }
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        stderrPath = "\(directory)/relay-\(UUID().uuidString.prefix(8)).stderr"
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        process.standardOutput = FileHandle.nullDevice
        try TestEnvironment.launch(process)
        let deadline = ContinuousClock.now + startTimeout
        while true {
            if (try? UnixLineClient(path: socketPath, receiveTimeoutSeconds: 1)) != nil { return }
            if !process.isRunning || ContinuousClock.now >= deadline { break }
            usleep(20_000) // waiting for a child process to bind: no event to await
        }
        throw RelayProcessError(
            message: "relay did not start listening on \(socketPath) within \(startTimeout): \(stderrText())")
    }

    /// Standard error so far.
    package func stderrText() -> String {
        (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
    }

    package var pid: Int32 { process.processIdentifier }

    /// Sends a signal and, for TERM/INT/KILL, waits for the exit, at most `within`. A relay
    /// still running then is killed, so that a stop that hangs fails its test (false, and the
    /// exit status of a SIGKILL) instead of holding the whole run for ever.
    @discardableResult
    package func signal(_ number: Int32, within: Duration = .seconds(60)) -> Bool {
        kill(process.processIdentifier, number)
        guard number != SIGHUP else { return true }
        guard !process.exited(within: within) else {
            process.waitUntilExit()
            return true
        }
        FileHandle.standardError.write(
            Data("relay \(pid) still running \(within) after signal \(number); killed\n".utf8))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return false
    }

    package var exitStatus: Int32 { process.terminationStatus }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Runs a one-shot command (`status --json`, `logs`, …) and returns its exit status and output.
    package static func command(_ arguments: [String], directory: String, timeout: Duration = .seconds(60)) throws -> (
        status: Int32, stdout: String, stderr: String
    ) {
        try run(binary, arguments, directory: directory, timeout: timeout)
    }

    /// Runs a program to its end (with `environment` added to the test's) and returns its exit status and output.
    ///
    /// Output goes through files, not pipes: Foundation's `Process` lets every child spawned
    /// meanwhile (a relay another test starts) inherit a pipe's write end, and reading to the
    /// end of the pipe would then wait for that child to exit.
    ///
    /// A program still running after `timeout` is killed and the call throws, naming it: a
    /// command that hangs (or a `run` that was meant to refuse its config and starts instead)
    /// fails the test in a minute rather than holding it for ever.
    package static func run(
        _ executable: String, _ arguments: [String], directory: String = NSTemporaryDirectory(),
        environment: [String: String] = [:], timeout: Duration = .seconds(60)
    ) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = TestEnvironment.current.merging(environment) { $1 }
        }
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let stem = "\(directory)/output-\(UUID().uuidString.prefix(8))"
        defer { for suffix in [".out", ".err"] { unlink(stem + suffix) } }
        for suffix in [".out", ".err"] { _ = FileManager.default.createFile(atPath: stem + suffix, contents: nil) }
        process.standardOutput = FileHandle(forWritingAtPath: stem + ".out")
        process.standardError = FileHandle(forWritingAtPath: stem + ".err")
        try TestEnvironment.launch(process)
        // The watchdog kills only while the child has not been seen to exit: its pid cannot have been reused.
        let pid = process.processIdentifier
        let watch = Mutex((finished: false, killed: false))
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            watch.withLock { state in
                guard !state.finished else { return }
                state.killed = true
                kill(pid, SIGKILL)
            }
        }
        process.waitUntilExit()
        let killed = watch.withLock { state in
            state.finished = true
            return state.killed
        }
        let stdout = (try? String(contentsOfFile: stem + ".out", encoding: .utf8)) ?? ""
        let stderr = (try? String(contentsOfFile: stem + ".err", encoding: .utf8)) ?? ""
        if killed {
            throw RelayProcessError(
                message:
                    "\(executable) \(arguments.joined(separator: " ")) did not finish within \(timeout); killed. stderr: \(stderr.suffix(2000))"
            )
        }
        return (process.terminationStatus, stdout, stderr)
    }
}

package struct RelayProcessError: Error, CustomStringConvertible {
    package let message: String
    package init(message: String) { self.message = message }
    package var description: String { message }
}

extension Process {
    /// Waits until the child has exited, at most `timeout`: whether it did. Foundation reaps the
    /// child on a thread of its own and offers no bounded wait, so this polls, on the caller's
    /// thread (tests run off the shared pool). Killing what did not exit is the caller's choice.
    package func exited(within timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while isRunning {
            guard ContinuousClock.now < deadline else { return false }
            usleep(2_000) // a child process exiting: no event to await
        }
        return true
    }
}

import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayService

@Suite(.offThePool) struct HealthFileTests {
    func directory() -> String {
        var template = Array("/tmp/grh.XXXXXX".utf8CString)
        return String(cString: template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!)! })
    }

    /// A planted or corrupt file (it may sit in world-writable `/dev/shm`) with numbers no Int64
    /// holds is "not one of ours", not a crash of `georelay status`.
    @Test(arguments: [
        #""atMs":1e400"#, #""atMs":9.3e18"#, #""atMs":-9.2233720368547758e18"#, #""pid":1e10"#, #""stallAfterMs":NaN"#,
    ])
    func numbersNoInt64HoldsMakeTheFileUnreadable(field: String) throws {
        let dir = directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = HealthFile(socketPath: dir + "/r.sock")
        let name = String(field.split(separator: ":")[0])
        var fields = [#""pid":1"#, #""atMs":5000"#, #""stallAfterMs":2000"#].filter { !$0.hasPrefix(name) }
        fields.append(field)
        try Data(("{" + fields.joined(separator: ",") + #","parts":[]}"#).utf8).write(
            to: URL(fileURLWithPath: file.path))
        #expect(file.read() == nil)
        _ = StatusReport.health(from: file, nowMs: 5000)
    }

    /// Beside a socket in memory (`/run/georelay`); in `/dev/shm` for a socket on disk, so a
    /// file rewritten every second never wears the card, at a path `status` computes alike.
    @Test func roundTripsBesideASocketInMemoryAndOffTheDiskOtherwise() throws {
        try #require(HealthFile.isInMemory(HealthFile.memoryDirectory), "this machine has no tmpfs at /dev/shm")
        var template = Array((HealthFile.memoryDirectory + "/grh.XXXXXX").utf8CString)
        let memory = String(cString: template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!)! })
        defer { try? FileManager.default.removeItem(atPath: memory) }
        #expect(HealthFile(socketPath: memory + "/r.sock").path == memory + "/r.sock.health")
        let dir = directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try #require(!HealthFile.isInMemory(dir), "/tmp is a tmpfs here: the disk case cannot be shown")
        let file = HealthFile(socketPath: dir + "/r.sock")
        #expect(file.path.hasPrefix(HealthFile.memoryDirectory + "/georelay-") && file.path.hasSuffix(".health"))
        #expect(HealthFile(socketPath: dir + "/./r.sock").path == file.path, "the same socket, the same file")
        #expect(HealthFile(socketPath: dir + "/other.sock").path != file.path)
        #expect(file.read() == nil)
        let written = report(at: 5000, ingest: 4900, writer: 1000)
        try file.write(written, pid: 42)
        #expect(file.read() == HealthFile.Contents(pid: 42, report: written))
        file.remove()
        #expect(!FileManager.default.fileExists(atPath: file.path))
    }

    @Test func statusJudgesTheFileWithItsOwnClockAndDistrustsAStaleOne() throws {
        let dir = directory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = HealthFile(socketPath: dir + "/r.sock")
        #expect(
            StatusReport.health(from: file, nowMs: 5000)
                == .unknown("the relay publishes no health (no readable \(file.path))"))
        try file.write(report(at: 5000, ingest: 4900, writer: 4000))
        // Written at 5000: at 5500 the writer's last turn (4000) is 1.5 s old, alive; at 6500, 2.5 s: stalled.
        guard case .known(let fresh) = StatusReport.health(from: file, nowMs: 5500),
            case .known(let later) = StatusReport.health(from: file, nowMs: 6500)
        else {
            Issue.record("a fresh file is known")
            return
        }
        #expect(fresh.isHealthy)
        #expect(later.stalled.map(\.key) == ["writer"])
        // Not rewritten within the stall limit: the monitor itself is not running.
        #expect(
            StatusReport.health(from: file, nowMs: 7100)
                == .unknown("the relay's health report is 2.1 s old: its monitor is not running"))
        #expect(
            StatusReport.health(from: file, nowMs: 100) == .unknown("the relay's health report is from before a reboot")
        )
    }
}

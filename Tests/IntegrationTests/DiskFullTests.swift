import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// A tmpfs with a size limit, mounted for one test and unmounted after it.
final class SmallFilesystem {
    let path: String
    private let parent: TemporaryDirectory

    /// Nil where the machine does not allow mounting (not root, or no mount namespace for us).
    init?(megabytes: Int) throws {
        parent = try TemporaryDirectory()
        path = parent.file("fs")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        guard
            (try? RelayProcess.run(
                "/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m,mode=0700", "georelay-test", path]))?.status
                == 0
        else {
            return nil
        }
    }

    /// Fills all but `freeBytes` of the filesystem with a file that `free()` deletes.
    func fill(leaving freeBytes: Int) throws {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { throw RelayProcessError(message: "statvfs \(path): errno \(errno)") }
        let available = Int(stats.f_bavail) * Int(stats.f_frsize)
        let size = max(0, available - freeBytes)
        let fd = open("\(path)/filler", O_CREAT | O_WRONLY, 0o600)
        defer { close(fd) }
        let chunk = [UInt8](repeating: 0x5A, count: 1 << 16)
        var written = 0
        while written < size {
            let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, min($0.count, size - written)) }
            guard n > 0 else { break }
            written += n
        }
    }

    func free() { unlink("\(path)/filler") }

    deinit { _ = try? RelayProcess.run("/bin/umount", ["-l", path]) }
}

/// The spool's disk fills up. Ingest answers `err spool-full`, what was
/// stored before is neither lost nor damaged, and ingest resumes by itself when space is freed.
@Suite(.offThePool) struct DiskFullTests {
    @Test func aFullDiskAnswersSpoolFullLosesNothingAndResumesWhenSpaceIsFreed() async throws {
        guard let filesystem = try SmallFilesystem(megabytes: 16) else {
            print(
                "disk full: SKIPPED, this machine does not allow mounting a tmpfs (needs root); run as root to cover scenario 4"
            )
            return
        }
        let world = try RelayWorld(spoolDirectory: filesystem.path)
        // The uplink is down throughout the filling, so nothing delivered can be deleted to make room.
        let proxy = try FaultProxy(targetPort: world.server.http.port)
        defer { proxy.stop() }
        proxy.setMode(.refuse)
        try world.writeConfig(traccarURL: "http://127.0.0.1:\(proxy.port)/")
        let relay = try world.start()
        try filesystem.fill(leaving: 1 << 20)
        let client = try world.client()

        var acknowledged = Set<Int64>()
        var full = 0
        var next = 0
        /// Writes a batch of 500 and returns its answers.
        func batch() throws -> [String] {
            let range = next..<(next + 500)
            next += 500
            let answers = try writeInBatches(client, device: "a", from: range.lowerBound, count: 500)
            for (i, answer) in zip(range, answers) {
                if answer.hasPrefix("ok ") {
                    acknowledged.insert(fixTimeMs(i))
                } else if answer.hasPrefix("err spool-full") {
                    full += 1
                } else {
                    Issue.record("line \(i): unexpected answer \(answer)")
                }
            }
            return answers
        }
        while full < 1000, next < 200_000 { _ = try batch() }
        #expect(full >= 1000, "the disk never filled (\(next) lines)")
        #expect(relay.process.isRunning)
        let stored = acknowledged.count
        #expect(try world.statusJSON()["spool"]?["rows"]?.number == Double(stored), "status on a full disk")

        // Space comes back: ingest resumes without a restart or a reconnect.
        filesystem.free()
        let resumed = try batch()
        #expect(resumed.allSatisfy { $0.hasPrefix("ok ") }, "\(resumed.first { !$0.hasPrefix("ok ") } ?? "")")

        // The link comes back: every position answered ok arrives.
        proxy.setMode(.pass)
        let expected = acknowledged
        let delivered = await world.server.waitForAll(["a": expected], timeout: .seconds(120))
        #expect(delivered, "acknowledged positions missing after the disk filled")
        // And the spool reopens cleanly after a restart.
        relay.signal(SIGTERM)
        try world.start()
        #expect(try world.statusJSON()["destinations"]?.array?.first?["pending"]?.number == 0)
        print(
            "disk full: \(stored) positions stored before the 16 MiB tmpfs filled, \(full) answered err spool-full, ingest resumed when space was freed, all \(expected.count) acknowledged delivered"
        )
    }

    /// With a quota and `drop-oldest`, ingest never refuses: the oldest undelivered positions make
    /// room (counted), and the newest position still gets through when the link returns.
    @Test func aQuotaWithDropOldestKeepsTheNewest() async throws {
        let world = try RelayWorld(spool: #"maxBytes: 1048576, whenFull: "drop-oldest""#)
        let proxy = try FaultProxy(targetPort: world.server.http.port)
        defer { proxy.stop() }
        proxy.setMode(.refuse)
        try world.writeConfig(
            spool: #"maxBytes: 1048576, whenFull: "drop-oldest""#, traccarURL: "http://127.0.0.1:\(proxy.port)/")
        try world.start()
        let answers = try writeInBatches(try world.client(), device: "a", count: 20_000)
        #expect(answers.count == 20_000)
        #expect(answers.allSatisfy { $0.hasPrefix("ok ") }, "\(answers.first { !$0.hasPrefix("ok ") } ?? "")")
        let spool = try world.statusJSON()["spool"]
        let dropped = spool?["dropped"]?.number ?? 0
        #expect(dropped > 0)
        // The quota counts the database's pages in use; the WAL beside it is kept to an eighth of the quota.
        #expect((spool?["usedBytes"]?.number ?? .infinity) <= 1_048_576)
        let fileBytes = spool?["fileBytes"]?.number ?? .infinity
        #expect(fileBytes <= 1_048_576 * 1.5, "database and WAL take \(fileBytes) bytes")
        proxy.setMode(.pass)
        let newest = fixTimeMs(19_999)
        #expect(await world.server.waitUntil(timeout: .seconds(60)) { $0.contains { $0.fixTimeMs == newest } })
        print(
            "quota drop-oldest: 20,000 answered ok into a 1 MiB spool, \(Int(dropped)) oldest dropped, \(Int(fileBytes)) bytes on disk, the newest delivered"
        )
    }
}

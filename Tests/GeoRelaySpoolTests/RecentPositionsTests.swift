import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// New positions wait in `recent` and move into `positions` in bulk: wherever a position
/// is, it is stored once, found by resends, read by forwarders in seq order, and counted.
@Suite(.offThePool) struct RecentPositionsTests {
    private func rows(_ spool: Spool) throws -> (recent: Int, merged: Int) {
        try spool.withWriterConnection { db in
            let count = try db.statement("SELECT (SELECT count(*) FROM recent), (SELECT count(*) FROM positions)")
            _ = try count.step()
            defer { count.reset() }
            return (count.int(0), count.int(1))
        }
    }

    @Test func aResendIsADuplicateWhereverTheFirstCopyIs() async throws {
        let fixture = SpoolFixture()
        do {
            let spool = try fixture.open()
            #expect(await spool.append([fix("a", 10), fix("a", 11)]) == [.stored(seq: 1), .stored(seq: 2)])
            #expect(try rows(spool) == (2, 0), "a commit stores into recent only")
            #expect(
                await spool.append([fix("a", 11), fix("a", 10, lat: 61)]) == [.duplicate(seq: 2), .conflict(seq: 1)])
            spool.close()
        }
        let spool = try fixture.open()
        defer { spool.close() }
        #expect(try rows(spool) == (0, 2), "closing merged recent into positions")
        // Merged: found through the unique index; an older fix that is new is stored.
        #expect(
            await spool.append([fix("a", 11), fix("a", 10, lat: 61), fix("a", 5), fix("a", 12)])
                == [.duplicate(seq: 2), .conflict(seq: 1), .stored(seq: 3), .stored(seq: 4)])
        let reader = try spool.makeReader()
        #expect(try reader.positions(deviceID: 1, device: "a", after: 0, limit: 10).map(\.seq) == [1, 2, 3, 4])
        var exported: [Int64] = []
        try reader.forEachPosition(deviceID: 1, device: "a", sinceMs: nil, untilMs: nil) {
            exported.append($0.timeMs)
            return true
        }
        #expect(exported == [5, 10, 11, 12].map { fix("a", $0).timeMs }, "an export reads both tables in fix order")
    }

    /// A crash leaves rows in `recent`: the next writer finds them, gives no seq twice,
    /// and forwarders and status see them.
    @Test func aCrashLeavesRecentRowsThatTheNextWriterKnows() async throws {
        let fixture = SpoolFixture()
        let crashed = SpoolFixture()
        do {
            let spool = try fixture.open()
            try await spool.register(destinations: [DestinationRegistration(name: "down", buffered: true)])
            _ = await spool.append([fix("a", 0), fix("b", 0), fix("a", 1)])
            // The files as a power cut would leave them: committed, in the WAL, not merged.
            try FileManager.default.createDirectory(
                atPath: crashed.directory + "/spool", withIntermediateDirectories: true)
            for suffix in ["", "-wal"] {
                try FileManager.default.copyItem(
                    atPath: fixture.settings.path + suffix, toPath: crashed.settings.path + suffix)
            }
            spool.close()
        }
        let spool = try crashed.open()
        defer { spool.close() }
        #expect(try rows(spool) == (3, 0))
        #expect(await spool.append([fix("a", 1), fix("a", 2)]) == [.duplicate(seq: 3), .stored(seq: 4)])
        let reader = try spool.makeReader()
        let status = try reader.status()
        #expect(status.rows == 4)
        #expect(status.destinations.first?.pending == 4)
        #expect(status.devices.map(\.received) == [3, 1], "devices count what waits in recent")
        #expect(status.devices.first?.lastFixMs == fix("a", 2).timeMs)
        #expect(try reader.pendingDevices(destination: "down").map(\.lastSeq) == [4, 2])
        #expect(try reader.newestSeq() == 4)
    }

    /// A burst merges each time the ring is full: forwarders read across the two tables without a gap.
    @Test func aBurstMergesInBulkAndReadersSeeOneSequence() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "down", buffered: true)])
        let slots = RecentPositions.newSpoolSlots
        let total = slots + 500
        var stored = 0
        for batch in stride(from: 0, to: total, by: 500) {
            let fixes = (batch..<min(total, batch + 500)).map { (i: Int) -> Position in
                fix(i % 2 == 0 ? "a" : "b", Int64(i / 2))
            }
            let results = await spool.append(fixes)
            stored += results.filter { if case .stored = $0 { true } else { false } }.count
        }
        #expect(stored == total)
        let split = try rows(spool)
        #expect(
            split.merged == slots && split.recent == total - slots,
            "one merge when the ring of \(slots) was full, the rest still recent: \(split)")
        let reader = try spool.makeReader()
        var seqs: [Int64] = []
        var after: Int64 = 0
        while true {
            let page = try reader.positions(deviceID: 1, device: "a", after: after, limit: 300)
            guard let last = page.last else { break }
            seqs += page.map(\.seq)
            after = last.seq
        }
        #expect(
            seqs == Array(stride(from: Int64(1), through: Int64(total), by: 2)),
            "device a's seqs, in order, across both tables")
        #expect(
            try reader.positions(after: Int64(total) - 3, limit: 10).map(\.seq) == [
                Int64(total) - 2, Int64(total) - 1, Int64(total),
            ])
        #expect(try reader.status().destinations.first?.pending == total)
        #expect(try reader.status().devices.map(\.received) == [Int64(total / 2), Int64(total / 2)])
    }

    /// A spool written before `recent` existed keeps its rows, and new ones follow their seqs.
    @Test func aSpoolFromBeforeRecentIsMigrated() async throws {
        let fixture = SpoolFixture()
        try FileManager.default.createDirectory(atPath: fixture.directory + "/spool", withIntermediateDirectories: true)
        do {
            let db = try SQLiteDatabase(path: fixture.settings.path)
            try db.execute("PRAGMA journal_mode = WAL")
            for migration in Schema.migrations.prefix(7) { try db.execute(migration) }
            try db.execute("PRAGMA user_version = 7")
            // Received now: with no destination they count as delivered, and retention (which may
            // run while a loaded machine holds this test) keeps them only while they are recent.
            let now = WallClock.nowMs()
            try db.execute(
                "INSERT INTO devices(name, last_seq, last_fix_ms, last_received_ms, received) VALUES('a', 2, \(fix("a", 1).timeMs), \(now), 2)"
            )
            try db.execute(
                """
                INSERT INTO positions(device_id, fix_ms, received_ms, lat, lon) VALUES(1, \(fix("a", 0).timeMs), \(now), 59, 10), (1, \(fix("a", 1).timeMs), \(now), 59, 10)
                """)
        }
        let spool = try fixture.open()
        defer { spool.close() }
        #expect(await spool.append([fix("a", 1), fix("a", 2)]) == [.duplicate(seq: 2), .stored(seq: 3)])
        let status = try spool.makeReader().status()
        #expect(status.rows == 3 && status.devices.first?.received == 3)
    }
}

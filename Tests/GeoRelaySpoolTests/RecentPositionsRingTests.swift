import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// The ring behind `recent`: seq `s` in slot `s % slots`, live above the merged watermark,
/// rewritten in place; a full ring merges before a slot is taken again.
@Suite(.offThePool) struct RecentPositionsRingTests {
    private let slots = RecentPositions.newSpoolSlots

    /// A position as a GPS unit sends it (speed, course, altitude, accuracy).
    private func unitFix(_ device: String, _ second: Int64) -> Position {
        Position(
            device: device, timeMs: 1_784_953_800_000 + second * 1000, lat: 59.123456 + Double(second) * 1e-5,
            lon: 10.654321, speed: 5.25, course: 181.5, altitude: 12.5, accuracy: 3.5)
    }

    private func scalars(_ spool: Spool, _ sql: String) throws -> [Int64] {
        try spool.withWriterConnection { db in
            let select = try db.statement(sql)
            defer { select.reset() }
            _ = try select.step()
            return (0..<Int(select.columnCount)).map { select.int64(Int32($0)) }
        }
    }

    private func allSeqs(_ reader: SpoolReader) throws -> [Int64] {
        try reader.positions(after: 0, limit: 100_000).map(\.seq)
    }

    /// Commits write into pre-allocated slots: the file gains no page and frees none.
    @Test func aCommitAllocatesNoPage() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        _ = await spool.append([unitFix("a", 0)])
        let before = try scalars(
            spool,
            "SELECT (SELECT page_count FROM pragma_page_count), (SELECT freelist_count FROM pragma_freelist_count)")
        for second in 1...300 {
            #expect(await spool.append([unitFix("a", Int64(second))]) == [.stored(seq: Int64(second) + 1)])
        }
        let after = try scalars(
            spool,
            "SELECT (SELECT page_count FROM pragma_page_count), (SELECT freelist_count FROM pragma_freelist_count)")
        #expect(after == before, "pages and free pages (before, after): \(before) \(after)")
        #expect(try scalars(spool, "SELECT count(*) FROM recent_slots") == [Int64(slots)])
    }

    /// A group that fits in a leaf gets one: every commit of four positions appends one frame
    /// (its leaf) to the WAL, never two, though four does not divide a leaf's slots.
    @Test func aGroupThatFitsInALeafRewritesOneLeaf() async throws {
        let fixture = SpoolFixture()
        fixture.settings.stateInterval = .seconds(60) // counters held: a commit writes positions only
        let spool = try fixture.open()
        defer { spool.close() }
        _ = await spool.append([unitFix("a", 0)])
        let (pageSize, perLeaf) = try spool.withWriterConnection { db in
            let recent = try RecentPositions(db: db, nowNs: 0)
            return (Int(try db.pragma("page_size") ?? "0") ?? 0, Int(recent.slotsPerLeaf))
        }
        #expect(perLeaf > 4, "a leaf holds more than a group: \(perLeaf)")
        let wal = fixture.settings.path + "-wal"
        func walBytes() throws -> Int { (try FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0 }
        var frames: [Int] = []
        for group in 0..<20 {
            let before = try walBytes()
            let results = await spool.append((1...4).map { unitFix("a", Int64(group * 4 + $0)) })
            #expect(results.allSatisfy { $0.seq != nil })
            frames.append((try walBytes() - before) / (pageSize + 24))
        }
        #expect(frames == Array(repeating: 1, count: 20), "frames each commit appended: \(frames)")
        #expect(try allSeqs(try spool.makeReader()) == Array(1...81))
    }

    /// Exactly a ring's worth stays recent; the next position merges them all and takes slot 0's
    /// successor, and the stale rows left in the slots are never read again.
    @Test func aFullRingForcesAMergeAndWrapsAround() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "down", buffered: true)])
        for batch in stride(from: 0, to: slots, by: 512) {
            _ = await spool.append((batch..<(batch + 512)).map { unitFix("a", Int64($0)) })
        }
        #expect(
            try scalars(spool, "SELECT (SELECT count(*) FROM recent), (SELECT count(*) FROM positions)") == [
                Int64(slots), 0,
            ],
            "a full ring, nothing merged yet")
        let next = Int64(slots) + 1
        #expect(
            await spool.append([unitFix("b", 0), unitFix("b", 1)]) == [.stored(seq: next), .stored(seq: next + 1)])
        #expect(
            try scalars(
                spool,
                "SELECT (SELECT count(*) FROM recent), (SELECT count(*) FROM positions), (SELECT seq FROM recent_merged)"
            )
                == [2, Int64(slots), Int64(slots)])
        #expect(
            try scalars(spool, "SELECT seq FROM recent_slots WHERE slot = 0") == [next],
            "seq \(next) wrapped round into slot 0")
        #expect(
            try scalars(spool, "SELECT seq FROM recent_slots WHERE slot = 2") == [3],
            "the next slot still holds its merged row")
        let reader = try spool.makeReader()
        #expect(try allSeqs(reader) == Array(1...(next + 1)), "every seq once, in order, across both tables")
        let status = try reader.status()
        #expect(status.rows == slots + 2 && status.destinations.first?.pending == slots + 2)
        #expect(status.counters["spool.merges"] == 1)
        // Resends of the merged and of the live are both found.
        #expect(
            await spool.append([unitFix("a", 0), unitFix("b", 1)]) == [.duplicate(seq: 1), .duplicate(seq: next + 1)])
    }

    /// A group that fails after a full ring merged inside it undoes the merge too: the writer reads
    /// the ring back, gives the same seqs again and loses nothing.
    @Test func aFailedGroupUndoesItsMergeAndTheRingIsReadBack() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        for batch in stride(from: 0, to: slots, by: 512) {
            _ = await spool.append((batch..<(batch + 512)).map { unitFix("a", Int64($0)) })
        }
        // SQLite stores a NaN as NULL, which lat's NOT NULL refuses: the group fails after the merge.
        var broken = unitFix("b", 1)
        broken.lat = .nan
        let failed = await spool.append([unitFix("b", 0), broken])
        #expect(failed.allSatisfy { if case .failed = $0 { true } else { false } }, "\(failed)")
        #expect(
            try scalars(
                spool,
                "SELECT (SELECT count(*) FROM recent), (SELECT count(*) FROM positions), (SELECT seq FROM recent_merged)"
            )
                == [Int64(slots), 0, 0], "the merge was rolled back with the group")
        let next = Int64(slots) + 1
        #expect(await spool.append([unitFix("b", 0), unitFix("a", 5)]) == [.stored(seq: next), .duplicate(seq: 6)])
        #expect(try allSeqs(try spool.makeReader()) == Array(1...next))
        #expect(try spool.makeReader().status().rows == slots + 1)
    }

    /// The database, not only the writer's memory, guards a live slot: a row the writer does not
    /// know of (as if its memory were wrong) fails the group instead of being overwritten.
    @Test func aSlotThatIsNotFreeIsNeverOverwritten() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        #expect(await spool.append([unitFix("a", 0)]) == [.stored(seq: 1)])
        try spool.withWriterConnection { db in try db.execute("UPDATE recent_slots SET seq = 5000 WHERE slot = 1") }
        let refused = await spool.append([unitFix("a", 1)])
        #expect(refused.allSatisfy { if case .failed = $0 { true } else { false } }, "\(refused)")
        #expect(
            try scalars(spool, "SELECT seq FROM recent_slots WHERE slot = 1") == [5000], "the live slot kept its row")
        // Read back after the failure, the writer knows the row and goes on above it.
        #expect(await spool.append([unitFix("a", 1)]) == [.stored(seq: 5001)])
    }

    /// A spool of schema 10 with rows in the `recent` table: the migration merges them into
    /// `positions` with their seqs and totals, and the ring starts above them.
    @Test func aSpoolWithTheRecentTableIsMigratedWithoutLosingARow() async throws {
        let fixture = SpoolFixture()
        try FileManager.default.createDirectory(atPath: fixture.directory + "/spool", withIntermediateDirectories: true)
        let now = WallClock.nowMs()
        do {
            let db = try SQLiteDatabase(path: fixture.settings.path)
            try db.execute("PRAGMA journal_mode = WAL")
            for migration in Schema.migrations.prefix(10) { try db.execute(migration) }
            try db.execute("PRAGMA user_version = 10")
            // Device a: seqs 1 and 2 merged, 3 and 4 waiting; device b: 5 waiting. Totals cover `positions` only.
            try db.execute(
                """
                INSERT INTO devices(name, last_seq, last_fix_ms, last_received_ms, received) VALUES('a', 2, \(fix("a", 1).timeMs), \(now), 2), ('b', 0, NULL, NULL, 0);
                INSERT INTO destinations(name, start_seq) VALUES('down', 0);
                INSERT INTO cursors(destination, device_id, acked_seq, settled) VALUES('down', 1, 1, 1);
                INSERT INTO positions(seq, device_id, fix_ms, received_ms, lat, lon) VALUES(1, 1, \(fix("a", 0).timeMs), \(now), 59, 10), (2, 1, \(fix("a", 1).timeMs), \(now), 59, 10);
                INSERT INTO recent(seq, device_id, fix_ms, received_ms, lat, lon, speed) VALUES
                    (3, 1, \(fix("a", 2).timeMs), \(now), 59, 10, 1.5), (4, 1, \(fix("a", 3).timeMs), \(now), 59, 10, 1.5), (5, 2, \(fix("b", 0).timeMs), \(now), 59, 10, 1.5);
                """)
        }
        let spool = try fixture.open()
        defer { spool.close() }
        #expect(
            try scalars(
                spool,
                "SELECT (SELECT count(*) FROM positions), (SELECT count(*) FROM recent), (SELECT seq FROM recent_merged)"
            ) == [5, 0, 5])
        let reader = try spool.makeReader()
        #expect(try reader.positions(deviceID: 1, device: "a", after: 0, limit: 10).map(\.seq) == [1, 2, 3, 4])
        #expect(try reader.positions(deviceID: 2, device: "b", after: 0, limit: 10).map(\.position.speed) == [1.5])
        var status = try reader.status()
        #expect(status.rows == 5 && status.devices.map(\.received) == [4, 1])
        #expect(status.destinations.first?.pending == 4, "seq 1 was acknowledged; 2 to 5 wait")
        #expect(await spool.append([fix("a", 3), fix("b", 1)]) == [.duplicate(seq: 4), .stored(seq: 6)])
        status = try reader.status()
        #expect(status.rows == 6 && status.destinations.first?.pending == 5)
        #expect(
            try scalars(spool, "SELECT count(*), (SELECT count(*) FROM recent) FROM recent_slots") == [Int64(slots), 1])
    }
}

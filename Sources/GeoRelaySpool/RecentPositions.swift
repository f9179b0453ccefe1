/// New positions wait in the `recent` table, which has no index, and move into
/// `positions` in bulk: every `mergeInterval`, at `maxRows`, before the quota evicts,
/// and when the spool closes.
///
/// Why: at a few positions a second each commit is fsynced alone, and a row in
/// `positions` rewrites a leaf of its table and one of each per-device index (a
/// different leaf per device) in the WAL, then again at checkpoint. That, not the
/// ~100 bytes of a position, is what wore an SD card (BENCHMARKS.md, flash). A row in
/// `recent` rewrites one leaf; the merge writes each index leaf once for hundreds of rows.
///
/// `recent` is small, so readers scan it beside their indexed search of `positions`
/// in one statement (one snapshot: a merge between two statements would hide rows).
/// Every seq in `recent` is above every seq in `positions`.
///
/// The writer keeps what the unique `(device_id, fix_ms)` index gives `positions`
/// in memory for `recent`: which fixes it holds. Touched only on the writer's queue.
package struct RecentPositions {
    struct Entry {
        var seq: Int64
        var lat: Double
        var lon: Double
    }

    /// Rows that force a merge: a burst merges in groups of this size.
    package static let maxRows = 4096
    /// How long positions wait at most: the longer, the fewer index pages per position
    /// (measured: 300 s against 60 s saves about 100 bytes per position at 4 × 1 Hz).
    static let mergeIntervalNs: UInt64 = 300 * 1_000_000_000

    /// Every row of `recent` by device and fix time.
    private var entries: [Int64: [Int64: Entry]] = [:]
    private(set) var count = 0
    /// The seq the next stored position gets: above everything stored or ever stored.
    private(set) var nextSeq: Int64 = 1
    /// Per device, `devices.last_fix_ms`: the newest fix in `positions`. A fix after it
    /// cannot be there, so a live position needs no lookup. nil inside: none stored.
    private var newestMerged: [Int64: Int64?] = [:]
    private var lastMergeNs: UInt64

    /// Reads `recent` back (at open, and after a failed transaction undid what memory holds).
    init(db: SQLiteDatabase, nowNs: UInt64) throws {
        lastMergeNs = nowNs
        let rows = try db.statement("SELECT seq, device_id, fix_ms, lat, lon FROM recent")
        while try rows.step() {
            entries[rows.int64(1), default: [:]][rows.int64(2)] = Entry(seq: rows.int64(0), lat: rows.double(3), lon: rows.double(4))
            count += 1
        }
        let next = try db.statement("""
            SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'positions'), 0),
                       coalesce((SELECT max(seq) FROM recent), 0))
            """)
        _ = try next.step()
        nextSeq = next.int64(0) + 1
        next.reset()
    }

    /// The stored position of this device at this fix time, in `recent` or `positions`.
    mutating func find(deviceID: Int64, fixMs: Int64, db: SQLiteDatabase) throws -> Entry? {
        if let entry = entries[deviceID]?[fixMs] { return entry }
        guard let newest = try newestMerged(deviceID: deviceID, db: db), fixMs <= newest else { return nil }
        let select = try db.statement("SELECT seq, lat, lon FROM positions WHERE device_id = ? AND fix_ms = ?")
        select.bind(1, deviceID)
        select.bind(2, fixMs)
        defer { select.reset() }
        guard try select.step() else { return nil }
        return Entry(seq: select.int64(0), lat: select.double(1), lon: select.double(2))
    }

    private mutating func newestMerged(deviceID: Int64, db: SQLiteDatabase) throws -> Int64? {
        if let known = newestMerged[deviceID] { return known }
        let select = try db.statement("SELECT last_fix_ms FROM devices WHERE id = ?")
        select.bind(1, deviceID)
        defer { select.reset() }
        let newest = try select.step() ? select.optionalInt64(0) : nil
        newestMerged[deviceID] = newest
        return newest
    }

    /// Takes the next seq for a row the caller is inserting.
    mutating func add(deviceID: Int64, fixMs: Int64, lat: Double, lon: Double) -> Int64 {
        let seq = nextSeq
        nextSeq += 1
        entries[deviceID, default: [:]][fixMs] = Entry(seq: seq, lat: lat, lon: lon)
        count += 1
        return seq
    }

    func isDue(nowNs: UInt64) -> Bool {
        count >= Self.maxRows || (count > 0 && nowNs &- lastMergeNs >= Self.mergeIntervalNs)
    }

    /// Moves every row of `recent` into `positions` inside the caller's transaction, and
    /// folds them into `devices`' totals in the same commit (so a crash leaves both or neither).
    /// - Returns: rows that were already in `positions` (none unless something is wrong).
    @discardableResult
    mutating func merge(db: SQLiteDatabase, nowNs: UInt64) throws -> Int {
        lastMergeNs = nowNs
        guard count > 0 else { return 0 }
        let moved = try Self.merge(db: db)
        entries.removeAll(keepingCapacity: true)
        newestMerged.removeAll(keepingCapacity: true)
        let expected = count
        count = 0
        return expected - moved
    }

    /// The merge's SQL, shared with the benchmark's SQLite limit. Returns the rows moved.
    /// `OR IGNORE`: a row whose fix is already in `positions` (the writer's check makes that
    /// impossible) must not wedge every later merge; the caller counts and logs it.
    package static func merge(db: SQLiteDatabase) throws -> Int {
        try db.execute("""
            UPDATE devices SET last_seq = max(last_seq, r.seq),
                last_fix_ms = max(coalesce(last_fix_ms, r.fix_ms), r.fix_ms),
                last_received_ms = max(coalesce(last_received_ms, r.received_ms), r.received_ms),
                received = received + r.n
            FROM (SELECT device_id, max(seq) AS seq, max(fix_ms) AS fix_ms, max(received_ms) AS received_ms, count(*) AS n
                  FROM recent GROUP BY device_id) AS r
            WHERE devices.id = r.device_id
            """)
        try db.execute("""
            INSERT OR IGNORE INTO positions(seq, device_id, fix_ms, received_ms, lat, lon, speed, course, altitude, accuracy, battery, charging, alarm, attributes)
            SELECT seq, device_id, fix_ms, received_ms, lat, lon, speed, course, altitude, accuracy, battery, charging, alarm, attributes
            FROM recent ORDER BY seq
            """)
        let moved = db.changes
        try db.execute("DELETE FROM recent")
        return moved
    }
}

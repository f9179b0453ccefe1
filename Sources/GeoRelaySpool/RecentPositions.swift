/// New positions wait in a ring of pre-allocated rows, `recent_slots`, and move into
/// `positions` in bulk: every `mergeInterval`, when the ring is full, before the quota evicts,
/// and when the spool closes.
///
/// Why: at a few positions a second each commit is fsynced alone, and a row in
/// `positions` rewrites a leaf of its table and one of each per-device index (a
/// different leaf per device) in the WAL, then again at checkpoint. That, not the
/// ~100 bytes of a position, is what wore an SD card (BENCHMARKS.md, flash). A slot of
/// the ring is updated in place: a commit rewrites the leaf its slots are in
/// and allocates nothing (an insert into a growing table also rewrote a new leaf, its
/// parent and page 1 every few commits). The merge writes each index leaf once for
/// hundreds of rows and moves a watermark; it does not touch the ring's pages.
///
/// Positions take the slots in turn, round the ring. A slot is live while its seq is above
/// `recent_merged.seq`, the highest seq merged; the `recent` view shows only live slots, so
/// readers scan it beside their indexed search of `positions` in one statement (one
/// snapshot: a merge between two statements would hide rows). Every seq in `recent` is above
/// every seq in `positions`. A slot is taken only when it is free (merged): a full ring merges
/// first. A group that would straddle two leaves starts at the next leaf instead
/// (`align(forGroupOf:)`), leaving the rest of the leaf unused this time round.
///
/// The writer keeps what the unique `(device_id, fix_ms)` index gives `positions`
/// in memory for `recent`: which fixes it holds. Touched only on the writer's queue.
package struct RecentPositions {
    struct Entry {
        var seq: Int64
        var lat: Double
        var lon: Double
    }

    /// Slots of the ring a new spool gets (fixed when it is made: the ring is read back at open).
    /// 2,048 holds the 1,200 positions of 300 s at 4 × 1 Hz and takes about 210 KiB at 512-byte
    /// pages (counted in the quota); a burst merges in groups of this size.
    package static let newSpoolSlots = 2048
    /// Bytes of placeholder in a free slot of a new ring, making its row 89 bytes: a slot rewritten
    /// with a position no larger (a GPS fix with speed, course, altitude and accuracy is about 80)
    /// stays in its leaf, so even the first round of the ring splits no page. Larger placeholders
    /// put fewer slots in a leaf (five to a 512-byte leaf, ten to 1 KiB), so more commits need two
    /// leaves. A larger position splits its leaf once, the first time round, and the ring keeps
    /// that layout.
    static let placeholderBytes = 72
    /// A placeholder slot's cell in its leaf: the record (the placeholder and 17 bytes more, as
    /// `dbstat` counts it), the length and rowid varints, the cell pointer.
    static let placeholderCellBytes = placeholderBytes + 17 + 3 + 2
    /// How long positions wait at most: the longer, the fewer index pages per position
    /// (measured: 300 s against 60 s saves about 100 bytes per position at 4 × 1 Hz).
    static let mergeIntervalNs: UInt64 = 300 * 1_000_000_000

    /// Every live row of the ring by device and fix time.
    private var entries: [Int64: [Int64: Entry]] = [:]
    private(set) var count = 0
    /// Slots in this spool's ring.
    let slotCount: Int64
    /// Slots to a leaf as the ring was made (equal placeholder rows appended in slot order fill
    /// each leaf before the next): leaf `j` holds slots `j * slotsPerLeaf ..< (j + 1) * slotsPerLeaf`.
    /// Only an estimate, for `align`: leaves split by larger positions hold fewer.
    let slotsPerLeaf: Int64
    /// Per slot, the seq it holds (0: never used); free while at or below `mergedSeq`.
    private var slotSeqs: [Int64]
    /// The slot the next position takes.
    private var nextSlot: Int64
    /// The highest seq merged into `positions`: slots holding a seq at or below it are free.
    private(set) var mergedSeq: Int64
    /// The seq the next stored position gets: above everything stored or ever stored.
    private(set) var nextSeq: Int64 = 1
    /// Per device, `devices.last_fix_ms`: the newest fix in `positions`. A fix after it
    /// cannot be there, so a live position needs no lookup. nil inside: none stored.
    private var newestMerged: [Int64: Int64?] = [:]
    private var lastMergeNs: UInt64

    /// Reads the ring back (at open, and after a failed transaction undid what memory holds).
    init(db: SQLiteDatabase, nowNs: UInt64) throws {
        lastMergeNs = nowNs
        let ring = try db.statement(
            """
            SELECT (SELECT seq FROM recent_merged), max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'positions'), 0),
                       (SELECT max(seq) FROM recent_slots), (SELECT seq FROM recent_merged)),
                   (SELECT page_size FROM pragma_page_size)
            """)
        _ = try ring.step()
        mergedSeq = ring.int64(0)
        nextSeq = ring.int64(1) + 1
        slotsPerLeaf = max(1, (ring.int64(2) - 8) / Int64(Self.placeholderCellBytes))
        ring.reset()
        let slots = try db.statement("SELECT slot, seq FROM recent_slots ORDER BY slot")
        var seqs: [Int64] = []
        while try slots.step() {
            guard slots.int64(0) == Int64(seqs.count) else {
                throw SpoolError.incompatible("the spool's ring of recent positions lacks slot \(seqs.count)")
            }
            seqs.append(slots.int64(1))
        }
        slots.reset()
        guard !seqs.isEmpty else { throw SpoolError.incompatible("the spool's ring of recent positions has no slots") }
        slotSeqs = seqs
        slotCount = Int64(seqs.count)
        // Round the ring after the newest position written.
        let newest = seqs.indices.max { seqs[$0] < seqs[$1] }!
        nextSlot = seqs[newest] > 0 ? (Int64(newest) + 1) % slotCount : 0
        let rows = try db.statement("SELECT seq, device_id, fix_ms, lat, lon FROM recent")
        while try rows.step() {
            entries[rows.int64(1), default: [:]][rows.int64(2)] = Entry(
                seq: rows.int64(0), lat: rows.double(3), lon: rows.double(4))
            count += 1
        }
        rows.reset()
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

    /// Whether the next slot still holds an unmerged position: merge before `add`.
    var isFull: Bool { slotSeqs[Int(nextSlot)] > mergedSeq }

    /// Before a group of `count` positions: if they fit in one leaf but not in what is left of
    /// the current one, they start at the next leaf. Each commit then rewrites one leaf, not two
    /// (at 4 × 1 Hz, 60 % of commits straddled two five-slot leaves); the skipped slots stay
    /// free. Bigger groups fill leaves whole anyway.
    mutating func align(forGroupOf count: Int) {
        let count = Int64(count)
        guard count > 1, count <= slotsPerLeaf else { return }
        let offset = nextSlot % slotsPerLeaf
        guard offset > 0, offset + count > slotsPerLeaf else { return }
        let next = nextSlot - offset + slotsPerLeaf
        nextSlot = next + count > slotCount ? 0 : next
    }

    /// Takes the next seq, and its slot, for a row the caller is writing.
    /// - Important: only when `isFull` is false; the slot's position would be lost otherwise
    ///   (the write would find it live and fail the group).
    mutating func add(deviceID: Int64, fixMs: Int64, lat: Double, lon: Double) -> (seq: Int64, slot: Int64) {
        precondition(!isFull, "the ring of recent positions is full: merge first")
        let seq = nextSeq
        let slot = nextSlot
        nextSeq += 1
        nextSlot = (nextSlot + 1) % slotCount
        slotSeqs[Int(slot)] = seq
        entries[deviceID, default: [:]][fixMs] = Entry(seq: seq, lat: lat, lon: lon)
        count += 1
        return (seq, slot)
    }

    func isDue(nowNs: UInt64) -> Bool {
        count > 0 && nowNs &- lastMergeNs >= Self.mergeIntervalNs
    }

    /// Moves every live row of the ring into `positions` inside the caller's transaction, and
    /// folds them into `devices`' totals in the same commit (so a crash leaves both or neither).
    /// - Returns: rows that were already in `positions` (none unless something is wrong).
    @discardableResult
    mutating func merge(db: SQLiteDatabase, nowNs: UInt64) throws -> Int {
        lastMergeNs = nowNs
        guard count > 0 else { return 0 }
        let moved = try Self.merge(db: db)
        mergedSeq = nextSeq - 1
        entries.removeAll(keepingCapacity: true)
        newestMerged.removeAll(keepingCapacity: true)
        let expected = count
        count = 0
        return expected - moved
    }

    /// The merge's SQL, shared with the benchmark's SQLite limit and the migration to the ring.
    /// Returns the rows moved. `OR IGNORE`: a row whose fix is already in `positions` (the
    /// writer's check makes that impossible) must not wedge every later merge; the caller counts
    /// and logs it. The slots keep their rows: the watermark frees them, so a merge rewrites
    /// none of the ring's pages.
    package static func merge(db: SQLiteDatabase) throws -> Int {
        try db.execute(mergeSQL)
        let moved = db.changes
        try db.execute("UPDATE recent_merged SET seq = max(seq, (SELECT coalesce(max(seq), 0) FROM recent_slots))")
        return moved
    }

    /// Folds `recent` into `devices` and copies it into `positions` (`db.changes` after it: rows copied).
    static let mergeSQL = mergeSQL(from: "recent")

    /// A position row's columns after `seq, device_id`, as `positions` and `recent` have them.
    static let rowColumns =
        "fix_ms, received_ms, lat, lon, speed, course, altitude, accuracy, battery, charging, alarm, attributes, odometer"

    /// The merge from a table of `recent`'s columns (the view, or the table it was before the ring,
    /// whose rows had the `columns` of their schema version).
    static func mergeSQL(from table: String, columns: String = rowColumns) -> String {
        """
        UPDATE devices SET last_seq = max(last_seq, r.seq),
            last_fix_ms = max(coalesce(last_fix_ms, r.fix_ms), r.fix_ms),
            last_received_ms = max(coalesce(last_received_ms, r.received_ms), r.received_ms),
            received = received + r.n
        FROM (SELECT device_id, max(seq) AS seq, max(fix_ms) AS fix_ms, max(received_ms) AS received_ms, count(*) AS n
              FROM \(table) GROUP BY device_id) AS r
        WHERE devices.id = r.device_id;
        INSERT OR IGNORE INTO positions(seq, device_id, \(columns))
        SELECT seq, device_id, \(columns) FROM \(table) ORDER BY seq;
        """
    }
}

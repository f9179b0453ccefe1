import GeoRelayCore

/// Deletes positions: delivered ones past retention, and whatever the quota demands.
/// It deletes from `positions` only: `recent` holds the newest, never the ones to go first
/// (and `devices.last_seq`, which `deliveredThrough` reads, covers `positions` only).
///
/// A position is delivered when every buffered destination's cursor for its
/// device has passed it. Quarantined positions are kept (an operator decides
/// about them) unless the quota forces them out with `drop-oldest`.
struct Eviction {
    let db: SQLiteDatabase
    let settings: Spool.Settings

    /// Rows deleted per statement, so one pass never holds the writer for long.
    static let chunk = 5_000

    /// Per device, the highest seq every buffered destination has acknowledged.
    func deliveredThrough() throws -> [(deviceID: Int64, seq: Int64)] {
        let select = try db.statement(
            """
            SELECT d.id, CASE WHEN d.hidden = 1 THEN d.last_seq ELSE coalesce((
                SELECT min(coalesce(c.acked_seq, dst.start_seq)) FROM destinations dst
                LEFT JOIN cursors c ON c.destination = dst.name AND c.device_id = d.id
                WHERE dst.buffered = 1), d.last_seq) END
            FROM devices d
            """)
        var rows: [(Int64, Int64)] = []
        while try select.step() { rows.append((select.int64(0), select.int64(1))) }
        return rows
    }

    /// Deletes delivered positions received before `retainHours` ago, except those a replay
    /// still has to send (the crew asked for them again; the quota alone may take them).
    /// - Parameter mergeRecent: called first when `recent` holds some of them (a retention
    ///   shorter than the merge interval); with hours of retention it never does.
    func deleteExpired(nowMs: Int64, mergeRecent: () throws -> Void = {}) throws -> Int {
        let cutoff = nowMs - Int64(settings.retainHours * 3_600_000)
        let old = try db.statement("SELECT EXISTS(SELECT 1 FROM recent WHERE received_ms < ?)")
        old.bind(1, cutoff)
        let merge = try old.step() && old.int64(0) != 0
        old.reset()
        if merge { try mergeRecent() }
        let deleted = try deleteDelivered(receivedBefore: cutoff, limit: .max, keepingReplays: true)
        // Replays of positions that are gone (the quota's doing) can never be sent.
        try db.execute(
            "DELETE FROM replay_queue WHERE seq NOT IN (SELECT seq FROM positions) AND seq NOT IN (SELECT seq FROM recent)"
        )
        // What went ahead of a backlog the cursor has since passed (or that is gone) is never
        // looked at again: without this, a still-alive position every 15 min and a backfill's
        // live edge every round would grow the table, and every round's read of it, for months.
        // Rows in `recent` stay (few, and mostly still pending); the next pass takes them.
        try db.execute(
            """
            DELETE FROM alarm_sent WHERE seq NOT IN (SELECT seq FROM recent) AND NOT EXISTS (
                SELECT 1 FROM positions p JOIN destinations dst ON dst.name = alarm_sent.destination
                LEFT JOIN cursors c ON c.destination = dst.name AND c.device_id = p.device_id
                WHERE p.seq = alarm_sent.seq AND p.seq > coalesce(c.acked_seq, dst.start_seq))
            """)
        return deleted
    }

    /// - Parameter keepingReplays: leaves the positions a replay still has to send (retention,
    ///   and the quota's first choice: a replay's history gives way before live positions do).
    private func deleteDelivered(receivedBefore cutoff: Int64, limit: Int, keepingReplays: Bool) throws -> Int {
        var deleted = 0
        // Rows come in in seq order, so a device's expired rows lead its delivered ones: the first
        // received at or after the cutoff ends the range, and a pass reads what it deletes, not
        // every row retention keeps (a week of 1 Hz fixes, read again every minute on an SD card).
        // A row behind it that a wall clock stepped back made look older waits for the rows
        // before it to expire: kept a little longer, never deleted early.
        let firstKept = try db.statement(
            "SELECT seq FROM positions WHERE device_id = ? AND seq <= ? AND received_ms >= ? ORDER BY seq LIMIT 1")
        let delete = try db.statement(
            """
            DELETE FROM positions WHERE seq IN (
                SELECT seq FROM positions WHERE device_id = ? AND seq <= ? AND received_ms < ?
                AND seq NOT IN (SELECT seq FROM quarantine)
                \(keepingReplays ? "AND seq NOT IN (SELECT seq FROM replay_queue)" : "") ORDER BY seq LIMIT ?)
            """)
        for (deviceID, delivered) in try deliveredThrough() where deleted < limit {
            firstKept.bind(1, deviceID)
            firstKept.bind(2, delivered)
            firstKept.bind(3, cutoff)
            let seq = try firstKept.step() ? firstKept.int64(0) - 1 : delivered
            firstKept.reset()
            while deleted < limit {
                delete.reset()
                delete.bind(1, deviceID)
                delete.bind(2, seq)
                delete.bind(3, cutoff)
                delete.bind(4, min(Self.chunk, limit - deleted))
                try delete.run()
                let n = db.changes
                deleted += n
                if n == 0 { break }
            }
        }
        if deleted > 0 { try countDeleted(deleted) }
        return deleted
    }

    /// Whether a replay waits for anything (most of the time nothing does).
    private func replaysQueued() throws -> Bool {
        let select = try db.statement("SELECT EXISTS(SELECT 1 FROM replay_queue)")
        defer { select.reset() }
        return try select.step() && select.int64(0) != 0
    }

    /// The highest seq among the oldest `chunk` positions (nil: none left).
    private func oldestChunkEnd() throws -> Int64? {
        let select = try db.statement(
            "SELECT max(seq) FROM (SELECT seq FROM positions ORDER BY seq LIMIT \(Self.chunk))")
        defer { select.reset() }
        return try select.step() ? select.optionalInt64(0) : nil
    }

    /// Undelivered positions the quota drops are settled for every destination that had not
    /// passed them, and its cursor moves past them, so pending (stored minus settled) stays true.
    private func settleCursors(through seq: Int64) throws {
        let settle = try db.statement(
            """
            INSERT INTO cursors(destination, device_id, acked_seq, settled)
            SELECT dst.name, p.device_id, ?1, count(*) FROM destinations dst JOIN positions p ON p.seq <= ?1
            LEFT JOIN cursors c ON c.destination = dst.name AND c.device_id = p.device_id
            WHERE dst.buffered = 1 AND p.seq > coalesce(c.acked_seq, dst.start_seq)
            GROUP BY dst.name, p.device_id
            ON CONFLICT(destination, device_id) DO UPDATE SET settled = settled + excluded.settled, acked_seq = max(acked_seq, excluded.acked_seq)
            """)
        settle.bind(1, seq)
        try settle.run()
    }

    /// Rows deleted, in the same transaction: status counts rows as stored minus deleted.
    private func countDeleted(_ n: Int) throws {
        try db.execute(
            "INSERT INTO counters(name, value) VALUES('spool.deleted', \(n)) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value"
        )
    }

    /// A generous estimate of what one stored position takes: its row and index entries.
    static let bytesPerPosition: Int64 = 160

    /// Bytes of the database file in use (free pages are reused before the file grows).
    func usedBytes() throws -> Int64 {
        let pages = Int64(try db.pragma("page_count") ?? "0") ?? 0
        let free = Int64(try db.pragma("freelist_count") ?? "0") ?? 0
        let size = Int64(try db.pragma("page_size") ?? "4096") ?? 4096
        return (pages - free) * size
    }

    struct Outcome {
        var dropped = 0
        /// At quota with nothing deletable under the `reject` policy.
        var full = false
    }

    /// Brings the spool under its quota: delivered positions first, then the
    /// `whenFull` policy. Frees a margin below the quota so this does not run
    /// on every group once the spool is full.
    /// - Parameter incomingBytes: what the group about to be written will take, so that the
    ///   quota holds after it, not only before.
    /// - Parameter mergeRecent: moves `recent` into `positions` first, in the same
    ///   transaction, so the oldest positions are all where eviction looks.
    func enforceQuota(incomingBytes: Int64 = 0, mergeRecent: () throws -> Void = {}) throws -> Outcome {
        var outcome = Outcome()
        guard try usedBytes() + incomingBytes >= settings.maxBytes else { return outcome }
        let target = settings.maxBytes - settings.maxBytes / 20
        try db.transaction {
            try mergeRecent()
            while try usedBytes() > target {
                if try deleteDelivered(receivedBefore: .max, limit: Self.chunk, keepingReplays: true) > 0 { continue }
                if try replaysQueued(),
                    try deleteDelivered(receivedBefore: .max, limit: Self.chunk, keepingReplays: false) > 0
                {
                    continue
                }
                guard settings.whenFull == .dropOldest else {
                    outcome.full = true
                    break
                }
                guard let through = try oldestChunkEnd() else { break }
                try settleCursors(through: through)
                try db.execute("DELETE FROM positions WHERE seq <= \(through)")
                let n = db.changes
                if n == 0 { break }
                try countDeleted(n)
                outcome.dropped += n
            }
        }
        return outcome
    }
}

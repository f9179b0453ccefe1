import GeoRelayCore
import Glibc

/// The writer's connection and everything that writes through it: a group of jobs applied in
/// one transaction (positions, acknowledgements, counters, the log, the chart, uplink usage),
/// the ring of recent positions, and the SQL of the facade's own writes.
///
/// Touched only on the writer's queue (`SpoolWriter`), which is what makes it safe without a
/// lock; when and with what company a job is applied is the queue's business, not the store's.
final class SpoolStore {
    let db: SQLiteDatabase
    let settings: Spool.Settings
    var logger: Logger = .disabled
    /// What the ring of recent positions holds, as memory knows it (read back after a rollback).
    private(set) var recent: RecentPositions
    /// Counters of groups committed while state was held, written with it.
    private var heldCounters = GroupCounters.Held()
    var deviceIDs: [String: Int64] = [:]
    /// Per device, its odometer as of its newest stored position (read from the spool when first
    /// needed, and again after a rollback).
    var odometers: [Int64: Odometer] = [:]
    /// Source receivers of multi-source devices: stored, never forwarded as themselves.
    var sourceDevices: Set<String> = []
    /// Per destination, positions acknowledged since a window began (for the send rate).
    var rateWindows: [String: (startMs: Int64, count: Int)] = [:]
    /// Set by the quota (`SpoolMaintenance`): new positions are answered `spool-full`.
    var rejectingNew = false
    /// Log rows inserted since the log was last trimmed (`SpoolMaintenance.trimLog`).
    var logRowsSinceTrim = 0

    /// Rows kept in the diagnostic log.
    static let logCapacity = 10_000

    /// What a committed group gives back for its jobs' answers.
    struct Applied {
        /// One per `.append`, in order.
        var results: [[AppendResult]] = []
        /// One per `.operation`, in order: an operation's failure is its caller's, not the group's.
        var operationErrors: [(any Error)?] = []
        var counters = GroupCounters()
    }

    init(settings: Spool.Settings) throws(SpoolError) {
        self.settings = settings
        let db = try SpoolConnection.openWriter(path: settings.path, maxBytes: settings.maxBytes)
        self.db = db
        recent = try SpoolError.wrapping { try RecentPositions(db: db, nowNs: settings.clock.monotonicNs()) }
    }

    /// Applies `jobs` in one transaction and commits it; held counters are written with it when
    /// `writingState`, and this group's held otherwise. On failure the transaction is rolled
    /// back, memory read back from the file, and the error thrown: nothing of the group stays.
    func apply(_ jobs: [SpoolJob], writingState: Bool) throws -> Applied {
        let incoming = jobs.reduce(0) { $0 + $1.positionCount }
        var recent = self.recent
        // The group's positions in one leaf of the ring where they fit (see `RecentPositions.align`).
        recent.align(forGroupOf: incoming)
        var applied = Applied()
        do {
            // No statement of this connection may still be mid-result here (read at open, by the
            // quota, or after a rollback): it would hold a read snapshot, and SQLite answers
            // BEGIN IMMEDIATE on a stale one with SQLITE_BUSY at once, without the busy timeout,
            // whenever the other writer (a `replay`, `logs --clear`, or the daemon beside that
            // command) committed since. A command failed so about half the time under load.
            db.resetStatements()
            try db.execute("BEGIN IMMEDIATE")
            for job in jobs {
                switch job {
                case .append(let positions, let receivedMs, _):
                    applied.results.append(
                        try insert(positions, receivedMs: receivedMs, recent: &recent, counters: &applied.counters))
                case .delivery(let update):
                    try apply(update)
                case .counters(let values):
                    for (name, value) in values { applied.counters.add(name, value) }
                case .gauges(let values):
                    applied.counters.gauges.merge(values) { $1 }
                case .log(let entry):
                    try insertLog(entry)
                case .chartSamples(let samples):
                    try insert(samples)
                case .uplinkUsage(let usage):
                    try insert(usage)
                case .integrity(let record, let beganEpisode):
                    try insert(record, beganEpisode: beganEpisode)
                case .barrier:
                    break
                case .operation(let body, _):
                    applied.operationErrors.append(try run(body))
                }
            }
            let nowNs = settings.clock.monotonicNs()
            // A command's writer (upkeep off) leaves `recent` to the daemon's, which holds it in memory.
            if settings.upkeep, recent.isDue(nowNs: nowNs) {
                try merge(&recent, nowNs: nowNs, counters: &applied.counters)
            }
            if writingState {
                applied.counters.take(heldCounters)
                try applied.counters.write(db)
            }
            db.resetStatements()
            try db.execute("COMMIT")
        } catch {
            db.resetStatements()
            if db.isInTransaction { try? db.execute("ROLLBACK") }
            deviceIDs.removeAll()
            odometers.removeAll()
            reloadRecent()
            throw error
        }
        self.recent = recent
        if writingState { heldCounters = GroupCounters.Held() } else { applied.counters.hold(in: &heldCounters) }
        return applied
    }

    /// Whether a group would write held counters even without jobs of its own.
    var holdsCounters: Bool { !heldCounters.added.isEmpty || !heldCounters.gauges.isEmpty }

    /// Runs an operation inside a savepoint: its own failure is rolled back and returned, and
    /// only a failure that ended the transaction fails the group.
    private func run(_ body: (SpoolStore) throws -> Void) throws -> (any Error)? {
        try db.execute("SAVEPOINT operation")
        do {
            try body(self)
            try db.execute("RELEASE operation")
            return nil
        } catch let error as SQLiteError where !db.isInTransaction {
            throw error
        } catch {
            try db.execute("ROLLBACK TO operation")
            try db.execute("RELEASE operation")
            return error
        }
    }

    // MARK: - Recent positions

    /// Merges `recent` inside the caller's transaction and counts it in the group's counters.
    func merge(_ recent: inout RecentPositions, nowNs: UInt64, counters: inout GroupCounters) throws {
        let already = try recent.merge(db: db, nowNs: nowNs)
        counters.add("spool.merges", 1)
        if already > 0 {
            counters.add("spool.merge.duplicates", Int64(already))
            logger.error("merging recent positions found \(already) already stored; kept the stored ones")
        }
    }

    /// Merges inside the caller's transaction, outside a group (close, retention, quota); its
    /// counters are held for the next state write.
    func mergeRecent() throws {
        var recent = self.recent
        var counters = GroupCounters()
        try merge(&recent, nowNs: settings.clock.monotonicNs(), counters: &counters)
        counters.hold(in: &heldCounters)
        self.recent = recent
    }

    /// After a rollback, memory may hold rows the database does not: read them back.
    func reloadRecent() {
        do {
            recent = try RecentPositions(db: db, nowNs: settings.clock.monotonicNs())
        } catch {
            logger.error("reading recent positions back failed: \(error)")
        }
    }

    // MARK: - Diagnostic log

    private func insertLog(_ entry: LogEntry) throws {
        let insert = try db.statement("INSERT INTO log(time_ms, level, message) VALUES(?, ?, ?)")
        insert.bind(1, entry.timeMs)
        insert.bind(2, entry.level.rawValue)
        insert.bind(3, String(entry.message.prefix(2000)))
        try insert.run()
        logRowsSinceTrim += 1
    }

    /// Keeps the newest `logCapacity` rows of the diagnostic log.
    func trimLog() {
        logRowsSinceTrim = 0
        try? db.execute("DELETE FROM log WHERE id <= (SELECT max(id) FROM log) - \(Self.logCapacity)")
    }
}

/// Counters gathered during one group and added in its transaction.
struct GroupCounters {
    var stored = 0
    /// Stored positions that carry an alarm: they wake forwarders mid-round.
    var alarms = 0
    var values: [String: Int64] = [:]
    /// Values set rather than added (`SpoolJob.gauges`): the newest wins.
    var gauges: [String: Int64] = [:]

    /// What groups that wrote no state leave for the next that does.
    struct Held {
        var added: [String: Int64] = [:]
        var gauges: [String: Int64] = [:]
    }

    mutating func add(_ name: String, _ value: Int64) { values[name, default: 0] += value }

    /// Takes what earlier groups held: their additions add up, their gauges are older than this group's.
    mutating func take(_ held: Held) {
        for (name, value) in held.added { add(name, value) }
        gauges.merge(held.gauges) { newer, _ in newer }
    }

    mutating func count(_ result: AppendResult) {
        switch result {
        case .duplicate: add("ingest.duplicates", 1)
        case .conflict: add("ingest.conflicts", 1)
        default: break
        }
    }

    /// Adds this group's counters to those held for the next state write.
    func hold(in held: inout Held) {
        for (name, value) in totals { held.added[name, default: 0] += value }
        held.gauges.merge(gauges) { $1 }
    }

    /// Every counter this group adds, the stored count included.
    private var totals: [String: Int64] {
        var all = values
        if stored > 0 {
            all["ingest.accepted", default: 0] += Int64(stored)
            // Groups that stored positions: accepted / commits is the mean group size.
            all["spool.commits", default: 0] += 1
        }
        return all
    }

    func write(_ db: SQLiteDatabase) throws {
        if !gauges.isEmpty {
            let set = try db.statement(
                "INSERT INTO counters(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value")
            for (name, value) in gauges {
                set.reset()
                set.bind(1, name)
                set.bind(2, value)
                try set.run()
            }
        }
        let all = totals
        guard !all.isEmpty else { return }
        let upsert = try db.statement(
            "INSERT INTO counters(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value"
        )
        for (name, value) in all {
            upsert.reset()
            upsert.bind(1, name)
            upsert.bind(2, value)
            try upsert.run()
        }
    }
}

import Dispatch
import Foundation
import GeoRelayCore
import Synchronization

/// The spool's single writer: one SQLite connection on one serial queue.
///
/// Every write of the relay (positions, acknowledgements, counters, the
/// diagnostic log) goes through here, so there is never a second writer to
/// wait for. Jobs that arrive while a commit is syncing are taken together
/// into the next transaction: group commit, so durability costs one fsync per
/// group, not per position.
final class SpoolWriter: @unchecked Sendable {
    enum Job: Sendable {
        case append([Position], receivedMs: Int64, completion: @Sendable ([AppendResult]) -> Void)
        case delivery(DeliveryUpdate)
        case counters([String: Int64])
        case log(LogEntry)
        case operation(@Sendable (SQLiteDatabase) throws -> Void, completion: @Sendable ((any Error)?) -> Void)
    }

    private struct Inbox {
        var jobs: [Job] = []
        var draining = false
        var closed = false
    }

    let settings: Spool.Settings
    let signal: CommitSignal
    private let inbox = Mutex(Inbox())
    private let queue = DispatchQueue(label: "georelay.spool.writer", qos: .userInitiated)

    // Touched only on `queue`.
    private var db: SQLiteDatabase?
    private var deviceIDs: [String: Int64] = [:]
    private var rejectingNew = false
    private var logRowsSinceTrim = 0
    var logger: Logger = .disabled
    private var maintenanceTimer: DispatchSourceTimer?

    /// Rows kept in the diagnostic log.
    static let logCapacity = 10_000

    init(settings: Spool.Settings, signal: CommitSignal) throws(SpoolError) {
        self.settings = settings
        self.signal = signal
        self.db = try SpoolConnection.openWriter(path: settings.path)
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + settings.maintenanceInterval, repeating: settings.maintenanceInterval)
        timer.setEventHandler { [weak self] in self?.maintain() }
        timer.resume()
        maintenanceTimer = timer
    }

    deinit {
        maintenanceTimer?.cancel()
    }

    /// Queues a job; it runs in the next group.
    func submit(_ job: Job) {
        let start = inbox.withLock { inbox -> Bool in
            guard !inbox.closed else { return false }
            inbox.jobs.append(job)
            if inbox.draining { return false }
            inbox.draining = true
            return true
        } 
        if start {
            queue.async { self.drain() }
        } else if inbox.withLock({ $0.closed }) {
            fail(job, with: .internal("the spool is closed"))
        }
    }

    /// Finishes queued work, checkpoints the WAL and closes the database.
    func close() {
        inbox.withLock { $0.closed = true }
        queue.sync {
            self.maintenanceTimer?.cancel()
            self.drainNow()
            if let db = self.db {
                _ = try? db.pragma("wal_checkpoint(TRUNCATE)")
            }
            self.db = nil
        }
        signal.finish()
    }

    /// Runs work on the writer's queue outside the job stream (tests, maintenance).
    func sync<T>(_ body: (SQLiteDatabase) throws -> T) throws -> T {
        try queue.sync {
            guard let db else { throw SpoolError.incompatible("the spool is closed") }
            return try body(db)
        }
    }

    // MARK: - Draining

    private func drain() {
        while true {
            let jobs = inbox.withLock { inbox -> [Job] in
                let jobs = inbox.jobs
                inbox.jobs.removeAll(keepingCapacity: true)
                if jobs.isEmpty { inbox.draining = false }
                return jobs
            }
            if jobs.isEmpty { return }
            process(jobs)
        }
    }

    /// Drains on the current (writer) queue without the draining flag dance.
    private func drainNow() {
        let jobs = inbox.withLock { inbox -> [Job] in
            defer { inbox.jobs.removeAll() }
            return inbox.jobs
        }
        if !jobs.isEmpty { process(jobs) }
    }

    private func fail(_ job: Job, with error: IngestError) {
        switch job {
        case .append(let positions, _, let completion):
            completion(Array(repeating: .failed(error), count: positions.count))
        case .operation(_, let completion):
            completion(SpoolError.incompatible(error.message))
        case .delivery, .counters, .log:
            break
        }
    }

    private func process(_ jobs: [Job]) {
        guard let db else {
            for job in jobs { fail(job, with: .internal("the spool is closed")) }
            return
        }
        let hasAppends = jobs.contains { if case .append = $0 { true } else { false } }
        if hasAppends { enforceQuota(db) }

        var results: [[AppendResult]] = []
        var counters = GroupCounters()
        var operationErrors: [(any Error)?] = []
        do {
            try db.execute("BEGIN IMMEDIATE")
            for job in jobs {
                switch job {
                case .append(let positions, let receivedMs, _):
                    results.append(try insert(positions, receivedMs: receivedMs, db: db, counters: &counters))
                case .delivery(let update):
                    try apply(update, db: db)
                case .counters(let values):
                    for (name, value) in values { counters.add(name, value) }
                case .log(let entry):
                    try insertLog(entry, db: db)
                case .operation(let body, _):
                    // An operation's own failure is its caller's; it does not fail the group.
                    try db.execute("SAVEPOINT operation")
                    do {
                        try body(db)
                        try db.execute("RELEASE operation")
                        operationErrors.append(nil)
                    } catch let error as SQLiteError where !db.isInTransaction {
                        throw error
                    } catch {
                        try db.execute("ROLLBACK TO operation")
                        try db.execute("RELEASE operation")
                        operationErrors.append(error)
                    }
                }
            }
            try counters.write(db)
            db.resetStatements()
            try db.execute("COMMIT")
        } catch {
            db.resetStatements()
            let sqlError = error as? SQLiteError
            if db.isInTransaction { try? db.execute("ROLLBACK") }
            deviceIDs.removeAll()
            let ingestError: IngestError = sqlError?.isFull == true
                ? .spoolFull("the disk is full: \(sqlError?.message ?? "")")
                : .internal("spool write failed: \(sqlError?.message ?? "\(error)")")
            logger.error("write of \(jobs.count) jobs failed: \(error)")
            for job in jobs { fail(job, with: ingestError) }
            // Acknowledgements and counters are worth a second try on their own.
            let retry = jobs.filter { if case .append = $0 { false } else if case .operation = $0 { false } else { true } }
            if !retry.isEmpty, retry.count < jobs.count { process(retry) }
            return
        }

        // Committed and synced: now, and only now, answer.
        var appendIndex = 0
        var operationIndex = 0
        for job in jobs {
            switch job {
            case .append(_, _, let completion):
                completion(results[appendIndex])
                appendIndex += 1
            case .operation(_, let completion):
                completion(operationErrors[operationIndex])
                operationIndex += 1
            default:
                break
            }
        }
        if counters.stored > 0 { signal.signal() }
        if logRowsSinceTrim > Self.logCapacity / 10 { trimLog(db) }
    }

    // MARK: - Positions

    private func insert(_ positions: [Position], receivedMs: Int64, db: SQLiteDatabase, counters: inout GroupCounters) throws -> [AppendResult] {
        let insert = try db.statement("""
            INSERT INTO positions(device_id, fix_ms, received_ms, lat, lon, speed, course, altitude, accuracy, battery, charging, alarm, attributes)
            VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        var results: [AppendResult] = []
        results.reserveCapacity(positions.count)
        var touched: [Int64: (seq: Int64, fixMs: Int64)] = [:]
        for p in positions {
            let deviceID = try deviceID(for: p.device, db: db)
            if rejectingNew {
                if let existing = try existing(deviceID: deviceID, fixMs: p.timeMs, matching: p, db: db) {
                    results.append(existing)
                    counters.count(existing)
                } else {
                    results.append(.failed(.spoolFull("the spool is at its quota of \(settings.maxBytes) bytes and whenFull is reject")))
                    counters.add("ingest.rejected.spool-full", 1)
                }
                continue
            }
            insert.reset()
            insert.bind(1, deviceID)
            insert.bind(2, p.timeMs)
            insert.bind(3, receivedMs)
            insert.bind(4, p.lat)
            insert.bind(5, p.lon)
            insert.bind(6, p.speed)
            insert.bind(7, p.course)
            insert.bind(8, p.altitude)
            insert.bind(9, p.accuracy)
            insert.bind(10, p.battery)
            insert.bind(11, p.charging)
            insert.bind(12, p.alarm)
            insert.bind(13, p.attributes.isEmpty ? nil : p.attributes.jsonText)
            // A plain INSERT, not ON CONFLICT DO NOTHING: a skipped insert would still
            // use up an AUTOINCREMENT value, leaving gaps in the seqs collectors see.
            if try insertNew(insert, db: db) {
                let seq = db.lastInsertRowID
                results.append(.stored(seq: seq))
                counters.stored += 1
                let previous = touched[deviceID]
                touched[deviceID] = (seq, max(previous?.fixMs ?? .min, p.timeMs))
            } else if let existing = try existing(deviceID: deviceID, fixMs: p.timeMs, matching: p, db: db) {
                results.append(existing)
                counters.count(existing)
            } else {
                throw SQLiteError(code: 1, message: "insert neither stored nor found a row", sql: nil)
            }
        }
        let update = try db.statement("""
            UPDATE devices SET last_seq = max(last_seq, ?2), last_fix_ms = max(coalesce(last_fix_ms, ?3), ?3), last_received_ms = ?4
            WHERE id = ?1
            """)
        for (deviceID, last) in touched {
            update.reset()
            update.bind(1, deviceID)
            update.bind(2, last.seq)
            update.bind(3, last.fixMs)
            update.bind(4, receivedMs)
            try update.run()
        }
        return results
    }

    /// Runs the insert; false when the device already has a position at that fix time.
    private func insertNew(_ insert: SQLiteStatement, db: SQLiteDatabase) throws -> Bool {
        do {
            try insert.run()
            return true
        } catch {
            if error.isUniqueViolation { return false }
            throw error
        }
    }

    private func existing(deviceID: Int64, fixMs: Int64, matching p: Position, db: SQLiteDatabase) throws -> AppendResult? {
        let select = try db.statement("SELECT seq, lat, lon FROM positions WHERE device_id = ? AND fix_ms = ?")
        select.bind(1, deviceID)
        select.bind(2, fixMs)
        guard try select.step() else { return nil }
        let seq = select.int64(0)
        let same = abs(select.double(1) - p.lat) < 1e-7 && abs(select.double(2) - p.lon) < 1e-7
        select.reset()
        return same ? .duplicate(seq: seq) : .conflict(seq: seq)
    }

    func deviceID(for name: String, db: SQLiteDatabase) throws -> Int64 {
        if let id = deviceIDs[name] { return id }
        let select = try db.statement("SELECT id FROM devices WHERE name = ?")
        select.bind(1, name)
        if try select.step() {
            let id = select.int64(0)
            select.reset()
            deviceIDs[name] = id
            return id
        }
        let insert = try db.statement("INSERT INTO devices(name) VALUES(?)")
        insert.bind(1, name)
        try insert.run()
        let id = db.lastInsertRowID
        deviceIDs[name] = id
        return id
    }

    // MARK: - Delivery state

    private func apply(_ update: DeliveryUpdate, db: SQLiteDatabase) throws {
        let ack = try db.statement("""
            INSERT INTO cursors(destination, device_id, acked_seq) VALUES(?, ?, ?)
            ON CONFLICT(destination, device_id) DO UPDATE SET acked_seq = max(acked_seq, excluded.acked_seq)
            """)
        for (deviceID, seq) in update.acknowledged {
            ack.reset()
            ack.bind(1, update.destination)
            ack.bind(2, deviceID)
            ack.bind(3, seq)
            try ack.run()
        }
        if !update.quarantined.isEmpty {
            let quarantine = try db.statement("INSERT OR REPLACE INTO quarantine(destination, seq, time_ms, reason) VALUES(?, ?, ?, ?)")
            let now = WallClock.nowMs()
            for (deviceID, seq, reason) in update.quarantined {
                quarantine.reset()
                quarantine.bind(1, update.destination)
                quarantine.bind(2, seq)
                quarantine.bind(3, now)
                quarantine.bind(4, reason)
                try quarantine.run()
                ack.reset()
                ack.bind(1, update.destination)
                ack.bind(2, deviceID)
                ack.bind(3, seq)
                try ack.run()
            }
        }
        if !update.parked.isEmpty {
            let park = try db.statement("""
                INSERT INTO cursors(destination, device_id, acked_seq, parked_until_ms, parked_reason)
                VALUES(?1, ?2, coalesce((SELECT start_seq FROM destinations WHERE name = ?1), 0), ?3, ?4)
                ON CONFLICT(destination, device_id) DO UPDATE SET parked_until_ms = excluded.parked_until_ms, parked_reason = excluded.parked_reason
                """)
            for (deviceID, until, reason) in update.parked {
                park.reset()
                park.bind(1, update.destination)
                park.bind(2, deviceID)
                park.bind(3, until)
                park.bind(4, reason)
                try park.run()
            }
        }
        if update.sent != 0 || update.wireBytes != 0 || update.state != nil {
            let state = try db.statement("""
                UPDATE destinations SET sent = sent + ?2, wire_bytes = wire_bytes + ?3, updated_ms = ?4,
                    state = coalesce(?5, state),
                    last_error = CASE WHEN ?5 IS NULL THEN last_error ELSE ?6 END,
                    next_attempt_ms = CASE WHEN ?5 IS NULL THEN next_attempt_ms ELSE ?7 END,
                    last_success_ms = coalesce(?8, last_success_ms)
                WHERE name = ?1
                """)
            state.bind(1, update.destination)
            state.bind(2, update.sent)
            state.bind(3, update.wireBytes)
            state.bind(4, WallClock.nowMs())
            state.bind(5, update.state?.state.rawValue)
            state.bind(6, update.state?.lastError)
            state.bind(7, update.state?.nextAttemptMs)
            state.bind(8, update.state?.lastSuccessMs)
            try state.run()
        }
    }

    // MARK: - Diagnostic log

    private func insertLog(_ entry: LogEntry, db: SQLiteDatabase) throws {
        let insert = try db.statement("INSERT INTO log(time_ms, level, message) VALUES(?, ?, ?)")
        insert.bind(1, entry.timeMs)
        insert.bind(2, entry.level.rawValue)
        insert.bind(3, String(entry.message.prefix(2000)))
        try insert.run()
        logRowsSinceTrim += 1
    }

    private func trimLog(_ db: SQLiteDatabase) {
        logRowsSinceTrim = 0
        try? db.execute("DELETE FROM log WHERE id <= (SELECT max(id) FROM log) - \(Self.logCapacity)")
    }

    // MARK: - Maintenance

    private func maintain() {
        guard let db else { return }
        do {
            let deleted = try db.transaction { try Eviction(db: db, settings: settings).deleteExpired(nowMs: WallClock.nowMs()) }
            if deleted > 0 { logger.debug("retention deleted \(deleted) delivered positions") }
        } catch {
            logger.warning("retention pass failed: \(error)")
        }
        trimLog(db)
        enforceQuota(db)
    }

    private func enforceQuota(_ db: SQLiteDatabase) {
        do {
            let outcome = try Eviction(db: db, settings: settings).enforceQuota()
            if outcome.dropped > 0 {
                logger.warning("spool at its quota of \(settings.maxBytes) bytes: dropped the \(outcome.dropped) oldest undelivered positions")
                try? db.execute("INSERT INTO counters VALUES('spool.dropped', \(outcome.dropped)) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value")
            }
            if outcome.full != rejectingNew {
                rejectingNew = outcome.full
                if outcome.full {
                    logger.error("spool at its quota of \(settings.maxBytes) bytes with nothing delivered to drop: rejecting new positions")
                } else {
                    logger.notice("spool below its quota again: accepting new positions")
                }
            }
        } catch {
            logger.error("quota check failed: \(error)")
        }
    }
}

/// Counters gathered during one group and added in its transaction.
struct GroupCounters {
    var stored = 0
    var values: [String: Int64] = [:]

    mutating func add(_ name: String, _ value: Int64) { values[name, default: 0] += value }

    mutating func count(_ result: AppendResult) {
        switch result {
        case .duplicate: add("ingest.duplicates", 1)
        case .conflict: add("ingest.conflicts", 1)
        default: break
        }
    }

    func write(_ db: SQLiteDatabase) throws {
        var all = values
        if stored > 0 {
            all["ingest.accepted", default: 0] += Int64(stored)
            // Groups that stored positions: accepted / commits is the mean group size.
            all["spool.commits", default: 0] += 1
        }
        guard !all.isEmpty else { return }
        let upsert = try db.statement("INSERT INTO counters(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value")
        for (name, value) in all {
            upsert.reset()
            upsert.bind(1, name)
            upsert.bind(2, value)
            try upsert.run()
        }
    }
}

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
        /// Writes nothing; `completion` runs once every job queued before it is committed (or failed for good).
        case barrier(completion: @Sendable () -> Void)

        /// Acknowledgements, counters and log entries are worth a second try on their own when
        /// their group fails; a barrier follows them so it still comes after them.
        var retriedAlone: Bool {
            switch self {
            case .append, .operation: false
            case .delivery, .counters, .log, .barrier: true
            }
        }
    }

    private struct Inbox {
        var jobs: [Job] = []
        var draining = false
        var closed = false
    }

    let settings: Spool.Settings
    let signal: CommitSignal
    let alarmSignal = CommitSignal()
    /// The queue's turns: after each group, and from a timer on the queue when idle.
    let heartbeat = Heartbeat("spool writer")
    private let inbox = Mutex(Inbox())
    private let queue = DispatchQueue(label: "georelay.spool.writer", qos: .userInitiated)

    // Touched only on `queue`.
    private var db: SQLiteDatabase?
    var deviceIDs: [String: Int64] = [:]
    /// Source receivers of multi-source devices: stored, never forwarded as themselves.
    var sourceDevices: Set<String> = []
    /// Per destination, positions acknowledged since a window began (for the send rate).
    var rateWindows: [String: (startMs: Int64, count: Int)] = [:]
    var rejectingNew = false
    private var logRowsSinceTrim = 0
    var logger: Logger = .disabled
    private var maintenanceTimer: DispatchSourceTimer?
    private var heartbeatTimer: DispatchSourceTimer?

    /// Rows kept in the diagnostic log.
    static let logCapacity = 10_000

    init(settings: Spool.Settings, signal: CommitSignal) throws(SpoolError) {
        self.settings = settings
        self.signal = signal
        self.db = try SpoolConnection.openWriter(path: settings.path, maxBytes: settings.maxBytes)
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + settings.maintenanceInterval, repeating: settings.maintenanceInterval)
        timer.setEventHandler { [weak self] in self?.maintain() }
        timer.resume()
        maintenanceTimer = timer
        // The timer runs on the queue, so it fires only while the queue turns over: a job stuck
        // in SQLite or an fsync holds it back and the heartbeat ages.
        let turn = DispatchTimeInterval.milliseconds(Int(max(1, settings.turnInterval.wholeMilliseconds)))
        let beat = DispatchSource.makeTimerSource(queue: queue)
        beat.schedule(deadline: .now() + turn, repeating: turn, leeway: .milliseconds(10))
        beat.setEventHandler { [heartbeat] in heartbeat.beat() }
        beat.resume()
        heartbeatTimer = beat
    }

    deinit {
        maintenanceTimer?.cancel()
        heartbeatTimer?.cancel()
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
            self.heartbeatTimer?.cancel()
            self.drainNow()
            if let db = self.db {
                _ = try? db.pragma("wal_checkpoint(TRUNCATE)")
            }
            self.db = nil
        }
        signal.finish()
        alarmSignal.finish()
    }

    /// Runs work on the writer's queue outside the job stream (tests, maintenance).
    func sync<T>(_ body: (SQLiteDatabase) throws -> T) throws -> T {
        try queue.sync {
            guard let db else { throw SpoolError.incompatible("the spool is closed") }
            return try body(db)
        }
    }

    /// Blocks the queue for `duration`, as a write stuck in the kernel would: test hook only.
    func stall(for duration: Duration) {
        queue.async {
            Thread.sleep(forTimeInterval: Double(duration.wholeMilliseconds) / 1000)
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
            // A writer kept busy by a steady stream of groups never lets the idle timer in.
            heartbeat.beat()
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
        case .barrier(let completion):
            completion()
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
                case .barrier:
                    break
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
            // Acknowledgements and counters are worth a second try on their own.
            let retry = jobs.filter(\.retriedAlone)
            let retrying = !retry.isEmpty && retry.count < jobs.count
            for job in jobs where !(retrying && job.retriedAlone) { fail(job, with: ingestError) }
            if retrying { process(retry) }
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
            case .barrier(let completion):
                completion()
            default:
                break
            }
        }
        if counters.stored > 0 { signal.signal() }
        if counters.alarms > 0 { alarmSignal.signal() }
        if logRowsSinceTrim > Self.logCapacity / 10 { trimLog(db) }
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
    /// Stored positions that carry an alarm: they wake forwarders mid-round.
    var alarms = 0
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

import Dispatch
import GeoRelayCore
import Glibc
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
        /// The status page's chart: held state, so a sample costs no commit of its own.
        case chartSamples([ChartSample])
        /// Wire bytes per uplink and day: held state too.
        case uplinkUsage([UplinkUsage])
        case operation(@Sendable (SQLiteDatabase) throws -> Void, completion: @Sendable ((any Error)?) -> Void)
        /// Writes nothing; `completion` runs once every job queued before it is committed (or failed for good).
        case barrier(completion: @Sendable () -> Void)

        /// Acknowledgements, counters and log entries are worth a second try on their own when
        /// their group fails; a barrier follows them so it still comes after them.
        /// Acknowledgements, counters and log entries: held until the state interval is up.
        var isState: Bool {
            switch self {
            case .delivery, .counters, .log, .chartSamples, .uplinkUsage: true
            case .append, .operation, .barrier: false
            }
        }

        var retriedAlone: Bool {
            switch self {
            case .append, .operation: false
            case .delivery, .counters, .log, .chartSamples, .uplinkUsage, .barrier: true
            }
        }
    }

    private struct Inbox {
        var jobs: [Job] = []
        /// A drain is queued or running and will look at the inbox again before it stops.
        var kicked = false
        var closed = false
        /// Positions wait here for their company (see `CommitWindow`).
        var window: CommitWindow
        /// A barrier or an operation waits: commit now, held state included.
        var urgent = false
        /// When held acknowledgements, counters and log entries are due at the latest.
        var stateDueNs: UInt64?
        /// Destinations whose last delivery was part of a drain: the one after it, which ends the
        /// drain, is committed as promptly, so `status` shows a drained backlog within a second.
        var draining: Set<String> = []

        func isDue(nowNs: UInt64) -> Bool {
            urgent || window.isDue(nowNs: nowNs) || stateDueNs.map { nowNs >= $0 } == true
        }
    }

    /// What `submit` asks of the queue once the inbox lock is released.
    private enum Wake {
        case none
        case now
        case at(UInt64)
        case rejected
    }

    let settings: Spool.Settings
    let signal: CommitSignal
    let alarmSignal = CommitSignal()
    /// The queue's turns: after each group, and from a timer on the queue when idle.
    let heartbeat = Heartbeat("spool writer")
    private let inbox: Mutex<Inbox>
    private let queue = DispatchQueue(label: "georelay.spool.writer", qos: .userInitiated)

    // Touched only on `queue`.
    private var db: SQLiteDatabase?
    /// What `recent` holds (nil once closed).
    private var recent: RecentPositions?
    /// Acknowledgements, counters and log entries held until `stateInterval` is up (see `Spool.Settings`).
    private var heldState: [Job] = []
    /// Counters of groups committed while state was held, written with it.
    private var heldCounters: [String: Int64] = [:]
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

    /// Held acknowledgements, counters and log entries beyond this are written at once.
    static let maxHeldState = 4096

    /// Rows kept in the diagnostic log.
    static let logCapacity = 10_000

    init(settings: Spool.Settings, signal: CommitSignal) throws(SpoolError) {
        self.settings = settings
        self.signal = signal
        inbox = Mutex(
            Inbox(window: CommitWindow(lengthNs: UInt64(max(0, settings.commitWindow.wholeMilliseconds)) * 1_000_000)))
        let db = try SpoolConnection.openWriter(path: settings.path, maxBytes: settings.maxBytes)
        self.db = db
        recent = try SpoolError.wrapping { try RecentPositions(db: db, nowNs: WallClock.monotonicNs()) }
    }

    /// Starts the upkeep's timer (with `Settings.upkeep`) and the heartbeat's; `stopTimers` ends them.
    /// On the queue, after whatever it is doing: never blocks the caller.
    func startTimers() {
        queue.async { [self] in
            guard db != nil, heartbeatTimer == nil else { return }
            if settings.upkeep {
                let timer = DispatchSource.makeTimerSource(queue: queue)
                timer.schedule(
                    deadline: .now() + settings.maintenanceInterval, repeating: settings.maintenanceInterval)
                timer.setEventHandler { [weak self] in self?.maintain() }
                timer.resume()
                maintenanceTimer = timer
            }
            // The timer runs on the queue, so it fires only while the queue turns over: a job stuck
            // in SQLite or an fsync holds it back and the heartbeat ages.
            let turn = DispatchTimeInterval.milliseconds(Int(max(1, settings.turnInterval.wholeMilliseconds)))
            let beat = DispatchSource.makeTimerSource(queue: queue)
            beat.schedule(deadline: .now() + turn, repeating: turn, leeway: .milliseconds(10))
            beat.setEventHandler { [weak self, heartbeat] in
                heartbeat.beat()
                self?.wakeUp()
            }
            beat.resume()
            heartbeatTimer = beat
        }
    }

    func stopTimers() {
        queue.async { [self] in
            maintenanceTimer?.cancel()
            heartbeatTimer?.cancel()
            maintenanceTimer = nil
            heartbeatTimer = nil
        }
    }

    deinit {
        maintenanceTimer?.cancel()
        heartbeatTimer?.cancel()
    }

    /// Queues a job; it runs in the next group that is due.
    func submit(_ job: Job) {
        let nowNs = WallClock.monotonicNs()
        let stateNs = UInt64(max(0, settings.stateInterval.wholeMilliseconds)) * 1_000_000
        let wake = inbox.withLock { inbox -> Wake in
            guard !inbox.closed else { return .rejected }
            inbox.jobs.append(job)
            var deadline: UInt64?
            switch job {
            case .append(let positions, _, _):
                let opening = inbox.window.openedNs == nil
                let now = inbox.window.append(
                    devices: Set(positions.map(\.device)), count: positions.count,
                    alarm: positions.contains { $0.alarm != nil }, nowNs: nowNs)
                if !now, opening { deadline = inbox.window.deadlineNs }
            case .barrier, .operation:
                inbox.urgent = true
            case .delivery, .counters, .log, .chartSamples, .uplinkUsage:
                var dueNs = nowNs + stateNs
                if case .delivery(let update) = job {
                    let prompt = update.drain || inbox.draining.contains(update.destination)
                    if update.drain {
                        inbox.draining.insert(update.destination)
                    } else {
                        inbox.draining.remove(update.destination)
                    }
                    if prompt {
                        dueNs = nowNs + min(stateNs, UInt64(Spool.drainCommitInterval.wholeMilliseconds) * 1_000_000)
                    }
                }
                if inbox.stateDueNs.map({ dueNs < $0 }) ?? true {
                    inbox.stateDueNs = dueNs
                    deadline = dueNs
                }
            }
            if inbox.isDue(nowNs: nowNs) {
                if inbox.kicked { return .none }
                inbox.kicked = true
                return .now
            }
            return deadline.map { .at($0) } ?? .none
        }
        switch wake {
        case .none: break
        case .now: queue.async { self.drain() }
        case .at(let deadlineNs):
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(deadlineNs &- nowNs))) { self.wakeUp() }
        case .rejected: fail(job, with: .internal("the spool is closed"))
        }
    }

    /// A window's or the held state's deadline (and every heartbeat, as a safety net): drain
    /// if nothing drained it meanwhile; a timer that fired a little early is set again.
    private func wakeUp() {
        let nowNs = WallClock.monotonicNs()
        let next = inbox.withLock { inbox -> UInt64?? in
            if inbox.kicked { return .some(nil) }
            if inbox.isDue(nowNs: nowNs) {
                inbox.kicked = true
                return nil
            }
            return .some([inbox.window.deadlineNs, inbox.stateDueNs].compactMap { $0 }.min())
        }
        switch next {
        case .none: drain()
        case .some(.some(let deadlineNs)):
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(deadlineNs &- nowNs) + 1_000_000)) { self.wakeUp() }
        case .some(.none): break
        }
    }

    /// Finishes queued work, checkpoints the WAL and closes the database.
    func close() {
        inbox.withLock { $0.closed = true }
        queue.sync {
            self.maintenanceTimer?.cancel()
            self.heartbeatTimer?.cancel()
            self.drainNow()
            if let db = self.db, self.settings.upkeep {
                // Merged on the way out: the next start (or an offline command) finds `recent` empty.
                do {
                    try db.transaction { try self.mergeRecent(db) }
                } catch {
                    self.logger.warning("merging recent positions at close failed (they stay in recent): \(error)")
                }
                _ = try? db.pragma("wal_checkpoint(TRUNCATE)")
            }
            self.db = nil
            self.recent = nil
        }
        signal.finish()
        alarmSignal.finish()
    }

    /// Runs work on the writer's queue outside the job stream (tests, maintenance).
    func sync<T>(_ body: (SQLiteDatabase) throws -> T) throws -> T {
        try queue.sync {
            guard let db else { throw SpoolError.notWritten("the spool is closed") }
            return try body(db)
        }
    }

    /// Blocks the queue for `duration`, as a write stuck in the kernel would: test hook only.
    func stall(for duration: Duration) {
        queue.async {
            sleepBlocking(seconds: Double(duration.wholeMilliseconds) / 1000)
        }
    }

    // MARK: - Draining

    private func drain() {
        while true {
            let taken = inbox.withLock { inbox -> (jobs: [Job], writeState: Bool)? in
                let nowNs = WallClock.monotonicNs()
                guard inbox.isDue(nowNs: nowNs) else {
                    inbox.kicked = false
                    return nil
                }
                let jobs = inbox.jobs
                inbox.jobs.removeAll(keepingCapacity: true)
                let writeState = inbox.urgent || inbox.stateDueNs.map { nowNs >= $0 } == true
                if writeState { inbox.stateDueNs = nil }
                inbox.urgent = false
                inbox.window.close()
                return (jobs, writeState)
            }
            guard let taken else { return }
            process(taken.jobs, writeState: taken.writeState)
            // A writer kept busy by a steady stream of groups never lets the idle timer in.
            heartbeat.beat()
        }
    }

    /// Drains on the current (writer) queue, everything and held state too.
    private func drainNow() {
        let jobs = inbox.withLock { inbox -> [Job] in
            defer {
                inbox.jobs.removeAll()
                inbox.window.close()
                inbox.urgent = false
                inbox.stateDueNs = nil
            }
            return inbox.jobs
        }
        process(jobs, writeState: true)
    }

    private func fail(_ job: Job, with error: IngestError) {
        switch job {
        case .append(let positions, _, let completion):
            completion(Array(repeating: .failed(error), count: positions.count))
        case .operation(_, let completion):
            completion(SpoolError.notWritten(error.message))
        case .barrier(let completion):
            completion()
        case .delivery, .counters, .log, .chartSamples, .uplinkUsage:
            break
        }
    }

    /// Commits a group. Acknowledgements, counters and log entries wait in `heldState` until
    /// `writeState` (their interval is up, someone waits on a barrier, or the spool closes), so
    /// a commit of positions at a low rate touches only the pages the positions need.
    private func process(_ taken: [Job], writeState: Bool) {
        let jobs: [Job]
        let writeState = writeState || settings.stateInterval == .zero
        if writeState || heldState.count + taken.count > Self.maxHeldState {
            jobs = heldState + taken
            heldState.removeAll()
        } else {
            heldState += taken.filter(\.isState)
            jobs = taken.filter { !$0.isState }
        }
        let writingState = writeState || jobs.contains(where: \.isState)
        guard !jobs.isEmpty || (writingState && !heldCounters.isEmpty) else { return }
        guard let db, self.recent != nil else {
            for job in jobs { fail(job, with: .internal("the spool is closed")) }
            return
        }
        let incoming = jobs.reduce(0) { if case .append(let positions, _, _) = $1 { $0 + positions.count } else { $0 } }
        if incoming > 0 { enforceQuota(db, incoming: incoming) }
        // After the quota, which may have merged it.
        guard var recent = self.recent else {
            for job in jobs { fail(job, with: .internal("the spool's recent positions could not be read")) }
            return
        }
        // The group's positions in one leaf of the ring where they fit (see `RecentPositions.align`).
        recent.align(forGroupOf: incoming)

        var results: [[AppendResult]] = []
        var counters = GroupCounters()
        var operationErrors: [(any Error)?] = []
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
                    results.append(
                        try insert(positions, receivedMs: receivedMs, db: db, recent: &recent, counters: &counters))
                case .delivery(let update):
                    try apply(update, db: db)
                case .counters(let values):
                    for (name, value) in values { counters.add(name, value) }
                case .log(let entry):
                    try insertLog(entry, db: db)
                case .chartSamples(let samples):
                    try insert(samples, db: db)
                case .uplinkUsage(let usage):
                    try insert(usage, db: db)
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
            let nowNs = WallClock.monotonicNs()
            // A command's writer (upkeep off) leaves `recent` to the daemon's, which holds it in memory.
            if settings.upkeep, recent.isDue(nowNs: nowNs) {
                try merge(&recent, db: db, nowNs: nowNs, counters: &counters)
            }
            if writingState {
                for (name, value) in heldCounters { counters.add(name, value) }
                try counters.write(db)
            }
            db.resetStatements()
            try db.execute("COMMIT")
            self.recent = recent
            if writingState { heldCounters.removeAll() } else { counters.hold(in: &heldCounters) }
        } catch {
            db.resetStatements()
            let sqlError = error as? SQLiteError
            if db.isInTransaction { try? db.execute("ROLLBACK") }
            deviceIDs.removeAll()
            reloadRecent(db)
            let ingestError: IngestError =
                sqlError?.isFull == true
                ? .spoolFull("the disk is full: \(sqlError?.message ?? "")")
                : .internal("spool write failed: \(sqlError?.message ?? "\(error)")")
            logger.error("write of \(jobs.count) jobs failed: \(error)")
            // Acknowledgements and counters are worth a second try on their own.
            let retry = jobs.filter(\.retriedAlone)
            let retrying = !retry.isEmpty && retry.count < jobs.count
            for job in jobs where !(retrying && job.retriedAlone) { fail(job, with: ingestError) }
            if retrying { process(retry, writeState: true) }
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

    // MARK: - Recent positions

    /// Merges `recent` inside the caller's transaction and counts it in the group's counters.
    func merge(_ recent: inout RecentPositions, db: SQLiteDatabase, nowNs: UInt64, counters: inout GroupCounters) throws
    {
        let already = try recent.merge(db: db, nowNs: nowNs)
        counters.add("spool.merges", 1)
        if already > 0 {
            counters.add("spool.merge.duplicates", Int64(already))
            logger.error("merging recent positions found \(already) already stored; kept the stored ones")
        }
    }

    /// Merges inside the caller's transaction, outside a group (close, quota).
    private func mergeRecent(_ db: SQLiteDatabase) throws {
        guard var recent else { return }
        var counters = GroupCounters()
        try merge(&recent, db: db, nowNs: WallClock.monotonicNs(), counters: &counters)
        counters.hold(in: &heldCounters)
        self.recent = recent
    }

    /// After a rollback, memory may hold rows the database does not: read them back.
    private func reloadRecent(_ db: SQLiteDatabase) {
        do {
            recent = try RecentPositions(db: db, nowNs: WallClock.monotonicNs())
        } catch {
            logger.error("reading recent positions back failed: \(error)")
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
            let deleted = try deleteExpired(db, nowMs: WallClock.nowMs())
            if deleted > 0 { logger.debug("retention deleted \(deleted) delivered positions") }
        } catch {
            logger.warning("retention pass failed: \(error)")
        }
        trimLog(db)
        enforceQuota(db, incoming: 0)
    }

    /// Retention, on the writer's queue (its own transaction).
    func deleteExpired(_ db: SQLiteDatabase, nowMs: Int64) throws -> Int {
        do {
            return try db.transaction {
                try Eviction(db: db, settings: settings).deleteExpired(nowMs: nowMs) { try self.mergeRecent(db) }
            }
        } catch {
            reloadRecent(db)
            throw error
        }
    }

    private func enforceQuota(_ db: SQLiteDatabase, incoming: Int) {
        do {
            let outcome = try Eviction(db: db, settings: settings).enforceQuota(
                incomingBytes: Int64(incoming) * Eviction.bytesPerPosition
            ) {
                try self.mergeRecent(db)
            }
            if outcome.dropped > 0 {
                logger.warning(
                    "spool at its quota of \(settings.maxBytes) bytes: dropped the \(outcome.dropped) oldest undelivered positions"
                )
                try? db.execute(
                    "INSERT INTO counters VALUES('spool.dropped', \(outcome.dropped)) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value"
                )
            }
            if outcome.full != rejectingNew {
                rejectingNew = outcome.full
                if outcome.full {
                    logger.error(
                        "spool at its quota of \(settings.maxBytes) bytes with nothing delivered to drop: rejecting new positions"
                    )
                } else {
                    logger.notice("spool below its quota again: accepting new positions")
                }
            }
        } catch {
            logger.error("quota check failed: \(error)")
            reloadRecent(db)
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

    /// Adds this group's counters to those held for the next state write.
    func hold(in held: inout [String: Int64]) {
        for (name, value) in totals { held[name, default: 0] += value }
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

import Dispatch
import GeoRelayCore
import Glibc
import Synchronization

/// The spool's commit queue: one serial queue in front of the one writing connection.
///
/// Every write of the relay (positions, acknowledgements, counters, the
/// diagnostic log) goes through here, so there is never a second writer to
/// wait for. Jobs that arrive while a commit is syncing are taken together
/// into the next transaction: group commit, so durability costs one fsync per
/// group, not per position. This type decides when a group is due and what it
/// holds back (state, on the state interval); `SpoolStore` applies the group and
/// `SpoolMaintenance` does the upkeep, both on this queue.
final class SpoolWriter: @unchecked Sendable {
    typealias Job = SpoolJob

    private struct Inbox {
        var jobs = JobQueue()
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
    let heartbeat: Heartbeat
    private let inbox: Mutex<Inbox>
    private let queue = DispatchQueue(label: "georelay.spool.writer", qos: .userInitiated)

    // Touched only on `queue`.
    /// The connection and what it applies (nil once closed).
    private var store: SpoolStore?
    /// Acknowledgements, counters and log entries held until `stateInterval` is up (see `Spool.Settings`).
    private var heldState = JobQueue()
    /// An idle turn is queued and has not run yet: a wedged queue gets one, not one per interval.
    private let turnQueued = Atomic<Bool>(false)

    /// Held acknowledgements, counters and log entries beyond this are written at once.
    static let maxHeldState = 4096

    init(settings: Spool.Settings, signal: CommitSignal, logger: Logger) throws(SpoolError) {
        self.settings = settings
        self.signal = signal
        heartbeat = Heartbeat("spool writer", clock: settings.clock)
        inbox = Mutex(
            Inbox(window: CommitWindow(lengthNs: UInt64(max(0, settings.commitWindow.wholeMilliseconds)) * 1_000_000)))
        let store = try SpoolStore(settings: settings)
        store.logger = logger
        self.store = store
    }

    /// Turns the queue over every `turnInterval` (a beat of the heartbeat, and a look at what
    /// is due) and, with `Settings.upkeep`, does the upkeep every `maintenanceInterval`, until the
    /// task is cancelled. Both wait on the spool's clock and run on the queue, so they follow the
    /// relay's time, and they run only while the queue turns over: a job stuck in SQLite or an
    /// fsync holds them back and the heartbeat ages.
    func runTimers() async {
        let clock = settings.clock
        let turnNs = SystemClock.nanoseconds(max(settings.turnInterval, .milliseconds(1)))
        let upkeepNs = SystemClock.nanoseconds(max(settings.maintenanceInterval, .milliseconds(1)))
        let start = clock.monotonicNs()
        var nextTurnNs = start.saturatingPlus(turnNs)
        var nextUpkeepNs: UInt64? = settings.upkeep ? start.saturatingPlus(upkeepNs) : nil
        while !Task.isCancelled {
            await clock.sleep(untilNs: min(nextTurnNs, nextUpkeepNs ?? .max))
            if Task.isCancelled { return }
            let nowNs = clock.monotonicNs()
            if nowNs >= nextTurnNs {
                nextTurnNs = nowNs.saturatingPlus(turnNs)
                queueTurn()
            }
            if let due = nextUpkeepNs, nowNs >= due {
                nextUpkeepNs = nowNs.saturatingPlus(upkeepNs)
                queue.async { [self] in
                    if let store { SpoolMaintenance(store: store).run() }
                }
            }
        }
    }

    /// An idle turn on the queue: the heartbeat's beat, and a drain if something fell due.
    private func queueTurn() {
        guard !turnQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async { [self] in
            turnQueued.store(false, ordering: .releasing)
            heartbeat.beat()
            wakeUp()
        }
    }

    /// Calls `wakeUp` on the queue once the spool's clock reaches `deadlineNs`: a window or the
    /// held state falls due in the relay's time, which a test or a simulation moves.
    private func wakeUp(atNs deadlineNs: UInt64) {
        let clock = settings.clock
        Task { [self] in
            await clock.sleep(untilNs: deadlineNs)
            queue.async { self.wakeUp() }
        }
    }

    /// Queues a job; it runs in the next group that is due.
    func submit(_ job: Job) {
        let nowNs = settings.clock.monotonicNs()
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
            case .delivery, .counters, .gauges, .log, .chartSamples, .uplinkUsage, .integrity:
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
        case .at(let deadlineNs): wakeUp(atNs: deadlineNs)
        case .rejected: job.fail(with: .internal("the spool is closed"))
        }
    }

    /// A window's or the held state's deadline (and every idle turn, as a safety net): drain
    /// if nothing drained it meanwhile; a deadline moved later meanwhile is waited for again.
    private func wakeUp() {
        let nowNs = settings.clock.monotonicNs()
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
        case .some(.some(let deadlineNs)): wakeUp(atNs: deadlineNs)
        case .some(.none): break
        }
    }

    /// Finishes queued work, checkpoints the WAL and closes the database.
    func close() {
        inbox.withLock { $0.closed = true }
        queue.sync {
            self.drainNow()
            if let store = self.store { SpoolMaintenance(store: store).close() }
            self.store = nil
        }
        signal.finish()
        alarmSignal.finish()
    }

    /// Runs work on the writer's queue outside the job stream (tests, maintenance).
    func sync<T>(_ body: (SpoolStore) throws -> T) throws -> T {
        try queue.sync {
            guard let store else { throw SpoolError.notWritten("the spool is closed") }
            return try body(store)
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
                let nowNs = settings.clock.monotonicNs()
                guard inbox.isDue(nowNs: nowNs) else {
                    inbox.kicked = false
                    return nil
                }
                let jobs = inbox.jobs.take()
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
                inbox.window.close()
                inbox.urgent = false
                inbox.stateDueNs = nil
            }
            return inbox.jobs.take()
        }
        process(jobs, writeState: true)
    }

    /// Commits a group. Acknowledgements, counters and log entries wait in `heldState` until
    /// `writeState` (their interval is up, someone waits on a barrier, or the spool closes), so
    /// a commit of positions at a low rate touches only the pages the positions need.
    private func process(_ taken: [Job], writeState: Bool) {
        let jobs: [Job]
        let writeState = writeState || settings.stateInterval == .zero
        if writeState || heldState.count + taken.count > Self.maxHeldState {
            jobs = heldState.take() + taken
        } else {
            heldState.append(contentsOf: taken.filter(\.isState))
            jobs = taken.filter { !$0.isState }
        }
        let writingState = writeState || jobs.contains(where: \.isState)
        guard !jobs.isEmpty || (writingState && store?.holdsCounters == true) else { return }
        guard let store else {
            for job in jobs { job.fail(with: .internal("the spool is closed")) }
            return
        }
        let incoming = jobs.reduce(0) { $0 + $1.positionCount }
        if incoming > 0 { SpoolMaintenance(store: store).enforceQuota(incoming: incoming) }
        let applied: SpoolStore.Applied
        do {
            applied = try store.apply(jobs, writingState: writingState)
        } catch {
            let sqlError = error as? SQLiteError
            let ingestError: IngestError =
                sqlError?.isFull == true
                ? .spoolFull("the disk is full: \(sqlError?.message ?? "")")
                : .internal("spool write failed: \(sqlError?.message ?? "\(error)")")
            store.logger.error("write of \(jobs.count) jobs failed: \(error)")
            // Acknowledgements and counters are worth a second try on their own.
            let retry = jobs.filter(\.retriedAlone)
            let retrying = !retry.isEmpty && retry.count < jobs.count
            for job in jobs where !(retrying && job.retriedAlone) { job.fail(with: ingestError) }
            if retrying { process(retry, writeState: true) }
            return
        }

        // Committed and synced: now, and only now, answer.
        var results = applied.results.makeIterator()
        var operationErrors = applied.operationErrors.makeIterator()
        for job in jobs {
            switch job {
            case .append(_, _, let completion):
                completion(results.next() ?? [])
            case .operation(_, let completion):
                completion(operationErrors.next() ?? nil)
            case .barrier(let completion):
                completion()
            case .delivery, .counters, .gauges, .log, .chartSamples, .uplinkUsage, .integrity:
                break
            }
        }
        if applied.counters.stored > 0 { signal.signal() }
        if applied.counters.alarms > 0 { alarmSignal.signal() }
        SpoolMaintenance(store: store).trimLogIfDue()
    }
}

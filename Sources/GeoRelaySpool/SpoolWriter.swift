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
    let heartbeat = Heartbeat("spool writer")
    private let inbox: Mutex<Inbox>
    private let queue = DispatchQueue(label: "georelay.spool.writer", qos: .userInitiated)

    // Touched only on `queue`.
    /// The connection and what it applies (nil once closed).
    private var store: SpoolStore?
    /// Acknowledgements, counters and log entries held until `stateInterval` is up (see `Spool.Settings`).
    private var heldState = JobQueue()
    private var maintenanceTimer: DispatchSourceTimer?
    private var heartbeatTimer: DispatchSourceTimer?

    /// Held acknowledgements, counters and log entries beyond this are written at once.
    static let maxHeldState = 4096

    init(settings: Spool.Settings, signal: CommitSignal, logger: Logger) throws(SpoolError) {
        self.settings = settings
        self.signal = signal
        inbox = Mutex(
            Inbox(window: CommitWindow(lengthNs: UInt64(max(0, settings.commitWindow.wholeMilliseconds)) * 1_000_000)))
        let store = try SpoolStore(settings: settings)
        store.logger = logger
        self.store = store
    }

    /// Starts the upkeep's timer (with `Settings.upkeep`) and the heartbeat's; `stopTimers` ends them.
    /// On the queue, after whatever it is doing: never blocks the caller.
    func startTimers() {
        queue.async { [self] in
            guard store != nil, heartbeatTimer == nil else { return }
            if settings.upkeep {
                let timer = DispatchSource.makeTimerSource(queue: queue)
                timer.schedule(
                    deadline: .now() + settings.maintenanceInterval, repeating: settings.maintenanceInterval)
                timer.setEventHandler { [weak self] in
                    if let store = self?.store { SpoolMaintenance(store: store).run() }
                }
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
        case .rejected: job.fail(with: .internal("the spool is closed"))
        }
    }

    /// A window's or the held state's deadline (and every heartbeat, as a safety net): drain
    /// if nothing drained it meanwhile; a timer that fired a little early is set again.
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
            case .delivery, .counters, .log, .chartSamples, .uplinkUsage:
                break
            }
        }
        if applied.counters.stored > 0 { signal.signal() }
        if applied.counters.alarms > 0 { alarmSignal.signal() }
        SpoolMaintenance(store: store).trimLogIfDue()
    }
}

import Dispatch
import FoundationEssentials
import GeoRelayCore
import Glibc
import Synchronization

/// The durable spool: every position answered `ok` is in here, committed and synced.
///
/// One SQLite database in WAL mode. Writes go through a single writer with
/// group commit; readers (forwarders, `georelay status`) use their own
/// connections and see the last commit without blocking the writer.
package final class Spool: Sendable {
    package struct Settings: Sendable {
        // Retention, quota and policy default to the configuration's, the one place they are set.
        package var path: String
        package var retainHours: Double
        package var maxBytes: Int64
        package var whenFull: Configuration.WhenFull
        /// How often retention and the quota are checked when nothing is written (on `clock`).
        package var maintenanceInterval: Duration = .seconds(60)
        /// Whether this writer does the spool's upkeep: retention, the quota's idle check, and
        /// merging recent positions (on a timer and at close) and the closing checkpoint. The
        /// daemon's does; a command's beside it (`openExisting`) must not, since the daemon's
        /// writer keeps what `recent` holds in memory.
        package var upkeep = true
        /// The longest the writer goes without turning over (and beating) when idle.
        package var turnInterval: Duration = Heartbeat.turnInterval
        /// How long a position may wait for its company before the commit (`CommitWindow`).
        /// Zero, what `init(path:)` gives, commits each group at once; the configuration's is not zero.
        package var commitWindow: Duration = .zero
        /// How long acknowledgements, counters and log entries may wait in memory before they
        /// are written (at the latest; a barrier, `flush()` or close writes them at once).
        package var stateInterval: Duration = .zero
        /// Where the spool's time comes from (arrival times, the held state's interval, retention,
        /// the daily counters' day): the system's, or a test's or simulation's.
        package var clock: any RelayClock = SystemClock()

        package init(path: String) {
            self.init(Configuration.SpoolSettings())
            self.path = path
            // The library commits each group with its state at once; a relay gets the flash-friendly
            // window and interval from its configuration.
            commitWindow = .zero
            stateInterval = .zero
        }

        package init(_ configuration: Configuration.SpoolSettings) {
            path = configuration.path
            retainHours = configuration.retainHours
            maxBytes = configuration.maxBytes
            whenFull = configuration.whenFull
            commitWindow = .milliseconds(configuration.commitWindowMs)
            stateInterval = .milliseconds(Int64(configuration.stateSyncSeconds * 1000))
        }
    }

    private let writer: SpoolWriter
    package let path: String
    /// The spool's time (`Settings.clock`).
    package let clock: any RelayClock
    /// Signals each commit that stored new positions.
    package let commits: CommitSignal
    /// Signals each commit that stored an alarm, so forwarders can cut a round short for it.
    package var alarms: CommitSignal { writer.alarmSignal }
    /// The writer's turns: it beats after each group and, while `runUpkeep` runs, each
    /// `turnInterval` when idle.
    package var writerHeartbeat: Heartbeat { writer.heartbeat }

    private let wireTally = Mutex<[String: Int64]>([:])

    package init(settings: Settings, logger: Logger = .disabled) throws(SpoolError) {
        let signal = CommitSignal()
        writer = try SpoolWriter(settings: settings, signal: signal, logger: logger)
        path = settings.path
        clock = settings.clock
        commits = signal
    }

    /// Stores positions; `completion` runs once they are committed and synced
    /// (or failed), on the writer's queue: keep it short.
    package func append(
        _ positions: [Position], receivedMs: Int64? = nil,
        completion: @escaping @Sendable ([AppendResult]) -> Void
    ) {
        writer.submit(.append(positions, receivedMs: receivedMs ?? clock.nowMs(), completion: completion))
    }

    package func append(_ positions: [Position], receivedMs: Int64? = nil) async -> [AppendResult] {
        await withCheckedContinuation { continuation in
            append(positions, receivedMs: receivedMs) { continuation.resume(returning: $0) }
        }
    }

    /// Records a destination's progress in the next commit, without waiting.
    /// How soon a backlog's drain progress is committed (``DeliveryUpdate/drain``).
    package static let drainCommitInterval: Duration = .seconds(1)

    package func record(_ update: DeliveryUpdate) {
        guard !update.isEmpty else { return }
        if update.payloadBytes > 0 {
            add(counters: ["forward.payloadBytes.\(update.destination)": Int64(update.payloadBytes)])
        }
        if update.wireBytes > 0 { wireTally.withLock { $0[update.destination, default: 0] += Int64(update.wireBytes) } }
        writer.submit(.delivery(update))
    }

    /// Wire bytes recorded per destination since this spool was opened, counted as they are
    /// recorded rather than once committed (state commits every 15 s): the uplink monitor
    /// attributes each few seconds' bytes to the uplink the route took in those seconds.
    package func wireBytesRecorded() -> [String: Int64] {
        wireTally.withLock { $0 }
    }

    /// Returns once everything recorded or submitted before the call is committed (or its write
    /// failed for good): a forwarder that starts after this reads cursors past every
    /// acknowledgement recorded so far. Returns at once on a closed spool.
    package func flush() async {
        await withCheckedContinuation { continuation in
            writer.submit(.barrier { continuation.resume() })
        }
    }

    /// Adds to named counters (`ingest.rejected.parse`, …) in the next commit.
    package func add(counters: [String: Int64]) {
        guard !counters.isEmpty else { return }
        writer.submit(.counters(counters))
    }

    /// Sets named values (a modem's signal, its last session) in the next state write: status
    /// reads them with the counters, and the newest set wins.
    package func set(gauges: [String: Int64]) {
        guard !gauges.isEmpty else { return }
        writer.submit(.gauges(gauges))
    }

    /// Appends an entry to the diagnostic log.
    package func log(_ entry: LogEntry) {
        writer.submit(.log(entry))
    }

    /// Adds points to the status page's chart, written with the next held state (no commit of their own).
    package func record(chartSamples: [ChartSample]) {
        guard !chartSamples.isEmpty else { return }
        writer.submit(.chartSamples(chartSamples))
    }

    /// A vessel's integrity watch changed state (`IntegrityRecord`), written with the next held state.
    package func record(integrity: IntegrityRecord, beganEpisode: Bool) {
        writer.submit(.integrity(integrity, beganEpisode: beganEpisode))
    }

    /// Adds wire bytes to uplinks' daily totals, written with the next held state.
    package func record(uplinkUsage: [UplinkUsage]) {
        guard uplinkUsage.contains(where: { $0.bytes > 0 }) else { return }
        writer.submit(.uplinkUsage(uplinkUsage))
    }

    /// Runs a write in the writer's next group and waits for its commit.
    func perform(_ body: @escaping @Sendable (SpoolStore) throws -> Void) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            writer.submit(
                .operation(body) { error in
                    if let error { continuation.resume(throwing: error) } else { continuation.resume() }
                })
        }
    }

    /// Makes the spool's destination table match the configuration.
    ///
    /// A new destination starts after the newest stored position; a removed
    /// one loses its delivery state; the others are untouched.
    package func register(destinations: [DestinationRegistration]) async throws {
        try await perform { store in try store.register(destinations: destinations) }
    }

    /// Marks the source receivers of multi-source devices: their positions are
    /// kept (each receiver's full history) but never forwarded under their own id.
    package func setSourceDevices(_ names: Set<String>) throws {
        try writer.sync { store in try store.setSourceDevices(names) }
    }

    /// Empties the diagnostic log.
    package func clearLog() async throws {
        try await perform { store in try store.clearLog() }
    }

    /// Opens a read-only connection for one reader.
    package func makeReader() throws(SpoolError) -> SpoolReader {
        try SpoolReader(path: path, clock: clock)
    }

    /// Does the spool's upkeep (retention, the quota's idle check, merging the ring of recent
    /// positions, with `Settings.upkeep`) and beats the writer's heartbeat, on the writer's queue,
    /// until the task is cancelled: the daemon runs it as one of its parts; a command's short-lived
    /// spool does without.
    package func runUpkeep() async {
        await writer.runTimers()
    }

    /// Finishes queued writes, checkpoints and closes. Appends after this fail with `internal`.
    package func close() {
        writer.close()
    }

    /// Blocks the writer's queue for `duration`, as a write stuck in the kernel would.
    ///
    /// - Important: A test hook (`GEORELAY_TEST_WEDGE`), never used otherwise: writes queue
    ///   up meanwhile (nothing is lost; collectors wait for their answers) and the heartbeat ages.
    package func stallWriterForTesting(_ duration: Duration) {
        writer.stall(for: duration)
    }

    /// Runs a block on the writer's connection (maintenance passes and tests).
    package func withWriterConnection<T>(_ body: (SQLiteDatabase) throws -> T) throws -> T {
        try writer.sync { store in try body(store.db) }
    }

    /// Runs the retention pass now instead of at the next maintenance tick.
    package func deleteExpired(nowMs: Int64? = nil) throws -> Int {
        let nowMs = nowMs ?? clock.nowMs()
        return try writer.sync { store in try SpoolMaintenance(store: store).deleteExpired(nowMs: nowMs) }
    }
}

/// Sends log entries to the spool's diagnostic log (`georelay logs`).
package struct SpoolLogSink: LogSink {
    let spool: Spool

    package init(spool: Spool) {
        self.spool = spool
    }

    package func record(_ entry: LogEntry) {
        spool.log(entry)
    }
}

extension Spool {
    /// The spool's writer for a one-shot command (`georelay replay`, `georelay logs --clear`):
    /// the same writer type as the daemon's, so every write to the file goes through one API.
    ///
    /// Unlike `init(settings:)` it never creates a spool: a command pointed at the wrong path
    /// says so instead of leaving an empty spool there.
    ///
    /// - Important: A running daemon has its own writer on the file; the two coexist through
    ///   SQLite's locking. Each group is one `BEGIN IMMEDIATE` transaction, so whichever writer
    ///   comes second waits on the file's write lock, for up to the connection's busy timeout
    ///   (5 s; a group commits in milliseconds), and readers go on reading the last commit (WAL).
    ///   It does none of the spool's upkeep (`Settings.upkeep`): that is the daemon's writer's.
    ///   Close it as soon as the command is done.
    package static func openExisting(settings: Settings, logger: Logger = .disabled) throws(SpoolError) -> Spool {
        guard FileManager.default.fileExists(atPath: settings.path) else {
            throw SpoolError.notFound("no spool at \(settings.path)")
        }
        var settings = settings
        settings.upkeep = false
        return try Spool(settings: settings, logger: logger)
    }

    /// Queues stored positions (by seq) for a destination again, in the writer's next group;
    /// the number newly queued (one already queued counts once). Which positions go is the
    /// caller's decision (`georelay replay` runs the destination's filter over whole positions);
    /// the spool only stores the queue, which the destination's forwarder drains as history.
    package func queueReplay(destination: String, seqs: [Int64]) async throws -> Int {
        let queued = Mutex(0)
        try await perform { store in
            let count = try store.queueReplay(destination: destination, seqs: seqs)
            queued.withLock { $0 = count }
        }
        return queued.withLock { $0 }
    }
}

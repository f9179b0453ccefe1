import GeoRelayCore
import GeoRelaySpool

/// Which spooled positions `georelay replay` sends a destination again: the decision the
/// spool does not make. It reads whole positions (alarms, attributes and a collector's
/// explicit `motion` included) and runs the destination's filter over each device's window
/// from a fresh memory, as the destination would have decided; the spool's writer then only
/// stores the chosen seqs (`Spool.queueReplay(destination:seqs:)`).
package struct ReplaySelection: Sendable {
    /// What a replay queued, and which devices' history no longer reaches back far enough.
    package struct Report: Sendable {
        package var queued = 0
        package var considered = 0
        /// Devices whose oldest stored fix is after the window's start: that part was evicted.
        package var evicted: [(device: String, oldestMs: Int64)] = []
    }

    package var sinceMs: Int64
    package var untilMs: Int64
    /// One device, or every device the destinations get (nil).
    package var device: String?
    /// The destination's filter; nil queues every position of the window (`--all`).
    package var filter: LocationFilter?

    package init(sinceMs: Int64, untilMs: Int64, device: String? = nil, filter: LocationFilter? = nil) {
        self.sinceMs = sinceMs
        self.untilMs = untilMs
        self.device = device
        self.filter = filter
    }

    /// The seqs to queue, device by device in fix-time order; `report` gets the counts and evictions.
    /// - Parameter hidden: the source receivers of multi-source devices, which are never
    ///   forwarded as themselves (`Configuration.sourceIDs`), so never replayed either.
    package func choose(from reader: SpoolReader, hidden: Set<String>, report: inout Report) throws -> [Int64] {
        var chosen: [Int64] = []
        for (id, name) in try reader.devices() where !hidden.contains(name) && (device == nil || device == name) {
            var oldest: Int64?
            try reader.forEachPosition(deviceID: id, device: name, sinceMs: nil, untilMs: nil) { position in
                oldest = position.timeMs
                return false
            }
            if let oldest, oldest > sinceMs { report.evicted.append((name, oldest)) }
            let keeps = filter?.replayChoice()
            try reader.forEachStoredPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { stored in
                report.considered += 1
                if keeps?(stored.position) ?? true { chosen.append(stored.seq) }
                return true
            }
        }
        return chosen
    }
}

extension Commands {
    /// Queues a window of the spool's history for `destination` again, through `selection`'s
    /// filter: the selection reads on a reader of its own, the spool's writer stores the queue.
    /// Works beside a running relay (see `Spool.openExisting`), whose forwarder drains the
    /// queue as history.
    package static func queueReplay(
        configuration: Configuration, destination: String,
        selection: ReplaySelection
    ) async throws -> ReplaySelection.Report {
        let settings = Spool.Settings(configuration.spool)
        let hidden = configuration.sourceIDs
        let (seqs, report) = try await onDedicatedThread(named: "georelay.replay.select") {
            () throws -> ([Int64], ReplaySelection.Report) in
            let reader = try SpoolReader.open(path: settings.path)
            var report = ReplaySelection.Report()
            let seqs = try selection.choose(from: reader, hidden: hidden, report: &report)
            return (seqs, report)
        }
        var done = report
        done.queued = try await withSpoolWriter(settings) { spool in
            try await spool.queueReplay(destination: destination, seqs: seqs)
        }
        return done
    }

    /// Runs `body` with the spool's writer, opened and closed on a thread of their own
    /// (opening and the closing checkpoint block); the one way a command writes the spool.
    static func withSpoolWriter<T: Sendable>(_ settings: Spool.Settings, _ body: (Spool) async throws -> T) async throws
        -> T
    {
        let spool = try await onDedicatedThread(named: "georelay.spool.open") { () throws -> Spool in
            try Spool.openExisting(settings: settings)
        }
        do {
            let result = try await body(spool)
            await onDedicatedThread(named: "georelay.spool.close") { spool.close() }
            return result
        } catch {
            await onDedicatedThread(named: "georelay.spool.close") { spool.close() }
            throw error
        }
    }
}

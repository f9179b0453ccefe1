import GeoRelayCore

/// One write for the spool's writer: what the facade (`Spool`) submits, what the commit queue
/// (`SpoolWriter`) groups and holds, and what the store (`SpoolStore`) applies.
enum SpoolJob: Sendable {
    case append([Position], receivedMs: Int64, completion: @Sendable ([AppendResult]) -> Void)
    case delivery(DeliveryUpdate)
    case counters([String: Int64])
    /// Named values set, not added (a modem's signal, its last session): kept in the counters
    /// table, so status reads them with the counters.
    case gauges([String: Int64])
    case log(LogEntry)
    /// The status page's chart: held state, so a sample costs no commit of its own.
    case chartSamples([ChartSample])
    /// Wire bytes per uplink and day: held state too.
    case uplinkUsage([UplinkUsage])
    /// A vessel's integrity watch changed state: held state too.
    case integrity(IntegrityRecord, beganEpisode: Bool)
    case operation(@Sendable (SpoolStore) throws -> Void, completion: @Sendable ((any Error)?) -> Void)
    /// Writes nothing; `completion` runs once every job queued before it is committed (or failed for good).
    case barrier(completion: @Sendable () -> Void)

    /// Acknowledgements, counters and log entries: held until the state interval is up.
    var isState: Bool {
        switch self {
        case .delivery, .counters, .gauges, .log, .chartSamples, .uplinkUsage, .integrity: true
        case .append, .operation, .barrier: false
        }
    }

    /// Acknowledgements, counters and log entries are worth a second try on their own when
    /// their group fails; a barrier follows them so it still comes after them.
    var retriedAlone: Bool {
        switch self {
        case .append, .operation: false
        case .delivery, .counters, .gauges, .log, .chartSamples, .uplinkUsage, .integrity, .barrier: true
        }
    }

    var positionCount: Int {
        if case .append(let positions, _, _) = self { positions.count } else { 0 }
    }

    /// Answers a job that will not run.
    func fail(with error: IngestError) {
        switch self {
        case .append(let positions, _, let completion):
            completion(Array(repeating: .failed(error), count: positions.count))
        case .operation(_, let completion):
            completion(SpoolError.notWritten(error.message))
        case .barrier(let completion):
            completion()
        case .delivery, .counters, .gauges, .log, .chartSamples, .uplinkUsage, .integrity:
            break
        }
    }
}

/// Jobs waiting for their commit, each destination's delivery updates folded into one as they
/// arrive (`DeliveryUpdate.absorb`): a draining backlog sends an update every 128 positions, and
/// held for the state interval they would be an entry per position.
///
/// An operation or a barrier ends the folding: an update after it is not moved ahead of it (an
/// operation may rewrite what the update touches, as clearing a destination's state does).
struct JobQueue {
    private(set) var jobs: [SpoolJob] = []
    /// Where each destination's foldable update is in `jobs`.
    private var deliveryAt: [String: Int] = [:]

    var count: Int { jobs.count }

    mutating func append(_ job: SpoolJob) {
        switch job {
        case .delivery(let update):
            if let at = deliveryAt[update.destination], case .delivery(var held) = jobs[at] {
                held.absorb(update)
                jobs[at] = .delivery(held)
                return
            }
            deliveryAt[update.destination] = jobs.count
        case .operation, .barrier:
            deliveryAt.removeAll()
        case .append, .counters, .gauges, .log, .chartSamples, .uplinkUsage, .integrity:
            break
        }
        jobs.append(job)
    }

    mutating func append(contentsOf jobs: some Sequence<SpoolJob>) {
        for job in jobs { append(job) }
    }

    /// Everything queued, leaving the queue empty.
    mutating func take() -> [SpoolJob] {
        defer {
            jobs.removeAll(keepingCapacity: true)
            deliveryAt.removeAll(keepingCapacity: true)
        }
        return jobs
    }
}

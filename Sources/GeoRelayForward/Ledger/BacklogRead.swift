import GeoRelayCore
import GeoRelaySpool

/// The devices' backlogs read as far as one batch needs, and what the filter keeps of them.
///
/// A batch takes the oldest kept positions across devices, so how far into each backlog it reaches
/// depends on how many devices share it and on how much the filter keeps: one device at 1 Hz
/// behind the default 50 m keeps one fix in ten and needs thousands read for a batch of 500; forty
/// devices' backlogs each give a batch a few dozen. Reading a fixed share of each (the batch's size,
/// or 8,192 over the devices) read twenty thousand rows for every batch of forty devices, and that
/// read, not the link, set the pace of a fleet's drain. So each backlog is read a little at first
/// and further only while the batch is short: by what the filter's keep so far says is missing,
/// spread over the backlogs that have more, until the batch fills or the read reaches the bound.
struct BacklogRead {
    /// Each device's positions read, in seq order; `full`: cut at a limit, more waits behind.
    var chunks: [(positions: [StoredPosition], full: Bool)]
    /// What the filter keeps of them, in device order, each device's in seq order.
    var candidates: [Delivery]
    /// The ledger and settlement after planning them.
    var ledger: DeliveryLedger
    var settled: DeliveryUpdate
    /// Whether some backlog was read only in part: the batch is not all there is.
    var more: Bool { chunks.contains(where: \.full) }

    /// The fewest positions read of a backlog at a time (one SQLite statement each).
    static let leastRead = 32

    /// - Parameters:
    ///   - batch: the positions a batch holds.
    ///   - bound: the most positions read in all, whatever the filter keeps.
    ///   - traccarAttributes: plan with `motion` and `archive` as Traccar reads them.
    init(
        source: some PendingSource, cursors: [DeviceCursor], ledger initial: DeliveryLedger,
        settled initialSettled: DeliveryUpdate,
        filter: LocationFilter, alreadySent: Set<Int64>, batch: Int, bound: Int, traccarAttributes: Bool = false
    ) throws(SpoolError) {
        var limit = max(Self.leastRead, batch / max(1, cursors.count))
        var chunks: [(positions: [StoredPosition], full: Bool)] = []
        for cursor in cursors {
            let positions = try source.positions(
                deviceID: cursor.deviceID, device: cursor.device, after: cursor.ackedSeq, limit: limit)
            chunks.append((positions, positions.count >= limit))
        }
        var read = chunks.reduce(0) { $0 + $1.positions.count }
        while true {
            // Planned afresh over everything read: the filter's memory runs through each device's
            // chunk from its start, so a chunk planned in two pieces would decide the second wrongly.
            var ledger = initial
            var settled = initialSettled
            var candidates: [Delivery] = []
            for chunk in chunks {
                candidates += ledger.plan(
                    chunk.positions, filter: filter, alreadySent: alreadySent, traccarAttributes: traccarAttributes,
                    into: &settled)
            }
            let cut = chunks.indices.filter { chunks[$0].full }
            guard candidates.count < batch, !cut.isEmpty, read < bound else {
                self.chunks = chunks
                self.candidates = candidates
                self.ledger = ledger
                self.settled = settled
                return
            }
            // What is missing at the keep seen so far, half again for the keep to vary; four times
            // what was read while the filter has kept nothing.
            let wanted = candidates.isEmpty ? 4 * read : (batch - candidates.count) * read * 3 / (2 * candidates.count)
            limit = max(Self.leastRead, min(bound - read, wanted) / cut.count)
            for index in cut {
                // A chunk cut at its limit holds positions; chunks are in the cursors' order.
                guard let last = chunks[index].positions.last else { continue }
                let cursor = cursors[index]
                let more = try source.positions(
                    deviceID: cursor.deviceID, device: cursor.device, after: last.seq, limit: limit)
                chunks[index].positions += more
                chunks[index].full = more.count >= limit
                read += more.count
            }
        }
    }
}

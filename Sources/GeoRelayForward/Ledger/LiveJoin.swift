import GeoRelayCore
import GeoRelaySpool
import Synchronization

/// Live fixes handed to a running round of history (issue 36 §2): the forwarder's task reads each
/// device's newest as it commits and posts it here; the round's driver takes it on the engine's
/// thread and the round sends it next on its device's connection, behind only what is on the wire.
/// Ending the round instead (the give-way) left the link idle for two round trips each time, so it
/// came at most every few seconds and a live fix waited for it.
///
/// One per destination, for the whole backfill: it also keeps the live edge's own filter chain
/// (`keep`), so a live fix goes only when the destination's filter would send it after the last
/// live fix sent, and a moored unit costs a metered link no more during a backfill than its rules
/// allow.
final class LiveJoin: Sendable {
    private let posted = Mutex<[Int64: StoredPosition]>([:])
    private let chain = Mutex<[Int64: FilterState]>([:])

    /// Of devices' newest positions, those the filter sends after the last live fix sent of each
    /// (at first, after what `ledger` has sent), each moving its device's chain.
    func keep(_ newest: [StoredPosition], filter: LocationFilter, ledger: DeliveryLedger) -> [StoredPosition] {
        chain.withLock { chain in
            newest.filter { stored in
                guard filter.accurateEnough(stored.position) else { return false }
                let state = chain[stored.deviceID] ?? ledger.filters[stored.deviceID] ?? FilterState()
                guard stored.position.timeMs > state.lastSentMs ?? .min else { return false }
                let (decision, next) = filter.evaluate(stored.position, state: state)
                guard case .send = decision else { return false }
                chain[stored.deviceID] = next
                return true
            }
        }
    }

    /// The backfill ended, or the link failed: the next one's live edge starts from the ledger.
    func reset() {
        chain.withLock { $0.removeAll() }
        posted.withLock { $0.removeAll() }
    }

    /// Keeps each device's newest of what is posted and not yet taken.
    func post(_ newest: [StoredPosition]) {
        posted.withLock { posted in
            for stored in newest where stored.seq > posted[stored.deviceID]?.seq ?? .min {
                posted[stored.deviceID] = stored
            }
        }
    }

    /// What was posted since the last take, by device id.
    func take() -> [StoredPosition] {
        posted.withLock { posted in
            defer { posted.removeAll(keepingCapacity: true) }
            return posted.values.sorted { $0.deviceID < $1.deviceID }
        }
    }
}

extension DeviceBatch {
    /// Puts `ahead`, the device's newest, at `index` of the batch: the next to go after what is on
    /// the wire. What follows it in the batch was planned as the server's newest and is history
    /// once the server has `ahead`: it goes `archive=true` (as `DevicePlan` marks history), and its
    /// filter state keeps `ahead` as the newest sent, so settling it does not take the server's
    /// newest back. Its `distance` stands: counted along the history already (`DevicePlan`).
    mutating func join(_ ahead: Delivery, at index: Int) {
        let newest = ahead.stored.position
        deliveries.insert(ahead, at: index)
        for later in deliveries.indices.dropFirst(index + 1) {
            if deliveries[later].stored.position.timeMs < newest.timeMs,
                !deliveries[later].stored.position.attributes.contains(where: { $0.key == "archive" })
            {
                deliveries[later].stored.position.attributes.append(Attribute("archive", .bool(true)))
            }
            deliveries[later].stateAfter.markNewest(newest)
        }
    }
}

extension DeliveryLedger {
    /// Of `stored`, a device's newest committed during a round, the delivery to send ahead of the
    /// rest of the round when the server will not have it or anything newer once what went before
    /// it (`sentBefore`, the device's deliveries this round up to here) is delivered; nil when the
    /// server does not know the device yet (the next round finds out) or has it already.
    func joining(_ stored: StoredPosition, after sentBefore: some Sequence<Delivery>) -> Delivery? {
        guard window(for: stored.deviceID) == nil else { return nil }
        return assuming(sentBefore).currentAhead([stored], sent: []).first.map(DevicePlan.aheadWithDistance)
    }
}

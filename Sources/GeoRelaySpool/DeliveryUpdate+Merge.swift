import GeoRelayCore

/// Folding one destination's held updates into one while they wait for the state interval.
///
/// A draining backlog hands the writer an update every 128 positions; held for a second (or the
/// state interval) at tens of thousands of positions a second, the per-position entries were the
/// relay's largest allocation (about 12 MB of a 1,000,000-position drain's peak). What applying
/// them needs is far less: a cursor per device, the last filter state per device.
extension DeliveryUpdate {
    /// Takes in `later` (same destination) so that applying the result is applying this update
    /// and then `later`: cursors only move forward (the highest seq per device), a device's last
    /// filter state holds, parks and quarantines keep their order, counts add up, and a state
    /// change is the later one, keeping the earlier success time when the later has none.
    package mutating func absorb(_ later: DeliveryUpdate) {
        precondition(later.destination == destination, "absorbing \(later.destination)'s update into \(destination)'s")
        acknowledged = Self.onePerDevice(
            acknowledged + later.acknowledged, device: { $0.deviceID }, merge: { $1.seq > $0.seq ? $1 : $0 })
        filterStates = Self.onePerDevice(
            filterStates + later.filterStates, device: { $0.deviceID }, merge: { $1 })
        quarantined += later.quarantined
        quarantinedUnreached += later.quarantinedUnreached
        parked += later.parked
        sent += later.sent
        behindNewer += later.behindNewer
        wireBytes += later.wireBytes
        payloadBytes += later.payloadBytes
        if var change = later.state {
            change.lastSuccessMs = change.lastSuccessMs ?? state?.lastSuccessMs
            state = change
        }
        encoding = later.encoding ?? encoding
        sentAhead += later.sentAhead
        replayed += later.replayed
        drain = drain || later.drain
    }

    /// One entry per device, in order of first appearance, `merge` deciding between a device's
    /// entry so far and its next one.
    static func onePerDevice<Entry>(
        _ entries: [Entry], device: (Entry) -> Int64, merge: (Entry, Entry) -> Entry
    ) -> [Entry] {
        var index: [Int64: Int] = [:]
        var result: [Entry] = []
        for entry in entries {
            if let at = index[device(entry)] {
                result[at] = merge(result[at], entry)
            } else {
                index[device(entry)] = result.count
                result.append(entry)
            }
        }
        return result
    }
}

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
        acknowledged = Self.highestPerDevice(acknowledged + later.acknowledged)
        filterStates = Self.lastPerDevice(filterStates + later.filterStates)
        quarantined += later.quarantined
        quarantinedUnreached += later.quarantinedUnreached
        parked += later.parked
        sent += later.sent
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

    /// One entry per device, its highest seq, devices in order of first appearance.
    static func highestPerDevice(_ entries: [(deviceID: Int64, seq: Int64)]) -> [(deviceID: Int64, seq: Int64)] {
        var index: [Int64: Int] = [:]
        var result: [(deviceID: Int64, seq: Int64)] = []
        for entry in entries {
            if let at = index[entry.deviceID] {
                result[at].seq = max(result[at].seq, entry.seq)
            } else {
                index[entry.deviceID] = result.count
                result.append(entry)
            }
        }
        return result
    }

    /// One entry per device, its last state, devices in order of first appearance.
    static func lastPerDevice(_ entries: [(deviceID: Int64, state: FilterState)]) -> [(
        deviceID: Int64, state: FilterState
    )] {
        var index: [Int64: Int] = [:]
        var result: [(deviceID: Int64, state: FilterState)] = []
        for entry in entries {
            if let at = index[entry.deviceID] {
                result[at].state = entry.state
            } else {
                index[entry.deviceID] = result.count
                result.append(entry)
            }
        }
        return result
    }
}

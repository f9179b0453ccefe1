import GeoRelayCore

/// What a fake server has received, in order, and the signal its handler raises with each: what
/// the tests wait on, the same way for every server.
package protocol ArrivalLog: AnyObject, Sendable {
    associatedtype Arrival: Sendable
    var arrivals: [Arrival] { get }
    var changed: WakeSignal { get }
}

extension ArrivalLog {
    /// Waits until `condition` holds over what arrived, or `timeout` passes. Returns whether it held.
    @discardableResult
    package func waitUntil(timeout: Duration = .seconds(30), _ condition: @Sendable ([Arrival]) -> Bool) async -> Bool {
        await awaitCondition(timeout: timeout, changed: changed, snapshot: { arrivals }, condition)
    }

    /// Waits until `condition` holds over what arrived, for as long as arrivals keep coming: fails
    /// once none has come for `stalledFor`. For a drain whose pace is the machine's, not the test's
    /// to assume.
    @discardableResult
    package func waitWhileArriving(stalledFor: Duration = .seconds(30), _ condition: @Sendable ([Arrival]) -> Bool)
        async -> Bool
    {
        await awaitCondition(
            timeout: stalledFor, whileGrowing: true, changed: changed, snapshot: { arrivals }, condition)
    }
}

extension ArrivalLog where Arrival: TraccarStoredPosition {
    /// Waits until every fix time in `expected` (per device) has arrived at least once.
    package func waitForAll(_ expected: [String: Set<Int64>], timeout: Duration = .seconds(30)) async -> Bool {
        await waitUntil(timeout: timeout) { holdsAll(expected, $0) }
    }

    /// As `waitForAll`, for as long as positions keep arriving: fails once none has come for
    /// `stalledFor`. For a drain whose pace is the machine's (a long run's hundreds of thousands).
    package func waitForAllWhileArriving(_ expected: [String: Set<Int64>], stalledFor: Duration = .seconds(60))
        async -> Bool
    {
        let total = expected.values.reduce(0) { $0 + $1.count }
        // Counted first: fewer arrivals than expected cannot hold them all, and a long drain is
        // looked at often.
        return await waitWhileArriving(stalledFor: stalledFor) { $0.count >= total && holdsAll(expected, $0) }
    }
}

/// Whether every fix time in `expected` (per device) is among `stored`.
func holdsAll(_ expected: [String: Set<Int64>], _ stored: [some TraccarStoredPosition]) -> Bool {
    var missing = expected
    for position in stored { missing[position.uniqueId]?.remove(position.fixTimeMs) }
    return missing.values.allSatisfy(\.isEmpty)
}

/// Waits until `condition` holds over `snapshot()`, woken by `changed`, at most `timeout`; with
/// `whileGrowing`, `timeout` is how long the records may stop growing: a drain that a loaded
/// machine slows is waited for as long as it moves, and one that stops fails as soon.
func awaitCondition<T: Sendable>(
    timeout: Duration, whileGrowing: Bool = false, changed: WakeSignal, snapshot: () -> [T],
    _ condition: ([T]) -> Bool
) async -> Bool {
    var deadline = ContinuousClock.now + timeout
    var grown = 0
    while true {
        // The snapshot is let go before waiting: held across the wait, it would make the server's
        // every append copy the whole record (copy on write), which on a drain of tens of
        // thousands slowed the server the test measured to a crawl.
        let (held, count) = { () -> (Bool, Int) in
            let records = snapshot()
            return (condition(records), records.count)
        }()
        if held { return true }
        if whileGrowing, count > grown {
            grown = count
            deadline = ContinuousClock.now + timeout
        }
        let remaining = deadline - ContinuousClock.now
        if remaining <= .zero { return false }
        await changed.wait(timeout: min(remaining, .milliseconds(500)))
        // Let a burst of arrivals land before evaluating again.
        if count > 1000 { try? await Task.sleep(for: .milliseconds(50)) }
    }
}

/// The order a destination may deliver one device's positions in, for tests of any transport.
///
/// A device behind (after an outage, a start-up, a budget freed) has its newest position sent
/// ahead of its backlog, and the backlog follows oldest first as history (older than what the
/// server already has). Read in order of arrival, each position is then either newer than every
/// one before it (what the server shows as the device's current position) or history, and the
/// history comes oldest first. Strict oldest-first delivery keeps the rule too.
package enum DeliveryOrder {
    /// What breaks the rule in `arrivals` (one device's fix times in order of first arrival), or
    /// nil when it holds.
    package static func problem<Fix: Comparable>(_ arrivals: [Fix]) -> String? {
        var newest: Fix?
        var lastHistory: Fix?
        for (index, time) in arrivals.enumerated() {
            guard let before = newest else {
                newest = time
                continue
            }
            if time > before {
                newest = time
            } else if time == before {
                return "arrival \(index) repeats fix \(time)"
            } else {
                if let lastHistory, time <= lastHistory {
                    return "arrival \(index), fix \(time), is history older than the history before it (\(lastHistory))"
                }
                lastHistory = time
            }
        }
        return nil
    }

    /// `arrivals` (one device's fix times in order of arrival) against what the device should
    /// have delivered: each of `expected` (oldest first) exactly once, in an order the rule allows.
    /// With `onlyNewestAhead` (every position was stored before delivery began, so the only one
    /// that may go ahead is the newest), each arrival is also either the oldest not yet arrived or
    /// the newest of all: the general rule alone would let two neighbours swap.
    /// nil when so, else what is wrong.
    package static func problem<Fix: Comparable & Hashable>(
        _ arrivals: [Fix], expected: [Fix], onlyNewestAhead: Bool = false
    ) -> String? {
        if onlyNewestAhead, arrivals.sorted() == expected, let newest = expected.last {
            var next = expected.startIndex
            var arrived = Set<Fix>()
            for (index, fix) in arrivals.enumerated() {
                arrived.insert(fix)
                while next < expected.endIndex, arrived.contains(expected[next]) { next += 1 }
                if fix != newest, next < expected.endIndex, fix > expected[next] {
                    return "arrival \(index), fix \(fix), went ahead of \(expected[next]) and is not the newest"
                }
            }
        }
        if arrivals.sorted() != expected {
            let (got, want) = (Set(arrivals), Set(expected))
            return
                "\(arrivals.count) arrived, \(expected.count) expected; missing \(Array(want.subtracting(got).sorted().prefix(5))), "
                + "not expected \(Array(got.subtracting(want).sorted().prefix(5))), \(arrivals.count - got.count) repeated"
        }
        return problem(arrivals)
    }

    /// The history in `arrivals`: each fix older than one that arrived before it.
    package static func history<Fix: Comparable>(_ arrivals: [Fix]) -> [Fix] {
        var newest: Fix?
        return arrivals.filter { time in
            defer { newest = newest.map { max($0, time) } ?? time }
            return newest.map { time < $0 } ?? false
        }
    }
}

extension DeliveryOrder {
    /// The same rule and the same "each expected fix exactly once", read one arrival at a time,
    /// for a run too long to keep every arrival (the voyage simulation's year): it holds only
    /// the fixes expected and not yet arrived, and each device's newest and last history.
    package struct Follower: Sendable {
        private struct Device: Sendable {
            var waiting = Set<Int64>()
            var newest: Int64?
            var lastHistory: Int64?
        }
        private var devices: [String: Device] = [:]
        /// Arrivals of a fix that was not waiting: a repeat (at least once allows them after a
        /// restart) or one never expected.
        package private(set) var repeats = 0
        package private(set) var arrivals = 0
        /// The first arrivals that broke the rule, with why (the first few).
        package private(set) var problems: [String] = []

        package init() {}

        /// `fix` of `device` is to arrive (before it can: as it is handed to the relay).
        package mutating func expect(_ device: String, _ fix: Int64) {
            devices[device, default: Device()].waiting.insert(fix)
        }

        /// `fix` will not arrive after all (the relay did not store it).
        package mutating func forget(_ device: String, _ fix: Int64) {
            devices[device]?.waiting.remove(fix)
        }

        package mutating func arrived(_ device: String, _ fix: Int64) {
            arrivals += 1
            guard devices[device]?.waiting.remove(fix) != nil else {
                repeats += 1
                return
            }
            var state = devices[device] ?? Device()
            defer { devices[device] = state }
            guard let newest = state.newest, fix < newest else {
                state.newest = fix
                return
            }
            if let last = state.lastHistory, fix <= last, problems.count < 5 {
                problems.append("\(device): fix \(fix) is history older than the history before it (\(last))")
            }
            state.lastHistory = fix
        }

        /// Per device, how many expected fixes have not arrived, with the oldest of them.
        package var missing: [(device: String, count: Int, oldest: Int64)] {
            devices.compactMap { device, state in
                state.waiting.min().map { (device, state.waiting.count, $0) }
            }.sorted { $0.device < $1.device }
        }
    }
}

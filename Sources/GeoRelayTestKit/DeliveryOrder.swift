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

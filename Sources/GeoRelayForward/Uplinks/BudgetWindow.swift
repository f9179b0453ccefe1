import Synchronization

/// How many positions a destination may have on the wire over a budgeted uplink: what is left of
/// the budget over what a position costs there (billed bytes, as the destination's `WireMeter`
/// counts them), so a budget is overrun by at most one request, not by a round: a pipelined
/// window of 128, or 25 positions each on a connection of its own, spent 6× a 3 KB budget before
/// the answer that spent it came back.
///
/// The cost is learnt from what the destination's answers billed (a moving average over about
/// the last 64 positions); until then a position is taken to cost 1,000 bytes, what one on a
/// connection of its own bills (handshake, request, answer, teardown).
final class BudgetWindow: Sendable {
    private let cost = Mutex<Double>(1_000)
    /// A round's own connection(s): the handshake and teardown, billed whatever is sent on them.
    static let connectionBytes: Int64 = 8 * 52

    /// An answer billed `bytes` for `positions` positions.
    func observe(billed bytes: Int, positions: Int) {
        guard positions > 0, bytes > 0 else { return }
        let each = Double(bytes) / Double(positions)
        let weight = min(1, Double(positions) / 64)
        cost.withLock { $0 += (each - $0) * weight }
    }

    var costPerPosition: Double { cost.withLock { $0 } }

    /// Positions that fit in `bytesLeft` (at least one, so a budget with a little left still
    /// moves; nil: no budget, no bound).
    func positions(fitting bytesLeft: Int64?) -> Int {
        guard let bytesLeft else { return .max }
        let usable = Double(bytesLeft - Self.connectionBytes)
        guard usable > 0 else { return 1 }
        return max(1, Int(min(usable / max(costPerPosition, 1), 1e9)))
    }
}

import Synchronization

/// How many positions a destination may have on the wire over a budgeted uplink: what is left of
/// the budget over what a position costs there (billed bytes, as the destination's `WireMeter`
/// counts them), so a budget is overrun by at most one request, not by a round: a pipelined
/// window of 128, or 25 positions each on a connection of its own, spent 6× a 3 KB budget before
/// the answer that spent it came back.
///
/// The cost is learnt from what the destination's hand-overs billed against the positions they
/// settled, summed (halved as they grow, so it follows a change of link): a pipelined round bills
/// its requests as they leave and settles them only as the answers come back, so a hand-over's
/// own ratio (answers over answer bytes) would take a position for less than half what it costs
/// on a 9.6 kbit/s link. Until a few are settled a position is taken to cost 1,000 bytes, what
/// one on a connection of its own bills (handshake, request, answer, teardown).
final class BudgetWindow: Sendable {
    private let sums = Mutex<(bytes: Double, positions: Double)>((0, 0))
    /// A round's own connection(s): the handshake and teardown, billed whatever is sent on them.
    static let connectionBytes: Int64 = 8 * 52

    /// A hand-over billed `bytes` and settled `positions` (either may be zero).
    func observe(billed bytes: Int, positions: Int) {
        guard bytes > 0 || positions > 0 else { return }
        sums.withLock { sums in
            sums.bytes += Double(max(0, bytes))
            sums.positions += Double(max(0, positions))
            if sums.positions > 512 {
                sums.bytes /= 2
                sums.positions /= 2
            }
        }
    }

    var costPerPosition: Double {
        sums.withLock { $0.positions >= 8 ? max(1, $0.bytes / $0.positions) : 1_000 }
    }

    /// Positions that fit in `bytesLeft` (at least one, so a budget with a little left still
    /// moves; nil: no budget, no bound), less what `meter` billed since its last hand-over (the
    /// last round's final ACKs and teardown, up to a second of a slow link's sending), which the
    /// budget has not seen yet.
    func positions(fitting bytesLeft: Int64?, meter: WireMeter) -> Int {
        guard let bytesLeft else { return .max }
        let usable = Double(bytesLeft - Int64(meter.unbilled()) - Self.connectionBytes)
        guard usable > 0 else { return 1 }
        return max(1, Int(min(usable / costPerPosition, 1e9)))
    }
}

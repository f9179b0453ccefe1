import GeoRelayCore
import GeoRelaySpool

/// Where every hand-over of one destination goes: rounds, batches, probes and state changes
/// alike. One place bills, records and spends, so a byte the link carried is counted once and
/// by one rule:
///
/// - The transports count what they sent and took in (HTTP, Teltonika frames) as `payloadBytes`;
///   the meter alone says what the link billed (`wireBytes`: IP headers, handshakes, ACKs,
///   retransmissions), read at the hand-over from every live socket.
/// - The bill goes to the budget's window (what a position costs here), the spool (status, the
///   uplink monitor) and the uplink's gate (the budget), probes' included.
/// - A hand-over that delivered something shows the destination online, at this clock's time.
package final class DeliveryRecorder: Sendable {
    let destination: String
    private let spool: Spool
    /// What this destination's connections cost the link (every socket of its rounds, probes, logins).
    let meter: WireMeter
    /// Where a spent uplink budget restricts what goes; nil without uplinks.
    let gate: UplinkGate?
    /// What a position costs on the wire here, to bound a round by a budget's remainder.
    let budgetWindow = BudgetWindow()
    private let clock: any RelayClock

    init(destination: String, spool: Spool, meter: WireMeter, gate: UplinkGate?, clock: any RelayClock) {
        self.destination = destination
        self.spool = spool
        self.meter = meter
        self.gate = gate
        self.clock = clock
    }

    /// Bills what the exchanges behind `update` cost the link since the last hand-over and
    /// records it.
    func record(_ update: DeliveryUpdate) {
        var update = update
        meter.sampleLive()
        update.wireBytes = meter.take()
        if update.sent > 0, update.state == nil {
            update.state = .init(state: .online, lastSuccessMs: clock.nowMs())
        }
        budgetWindow.observe(billed: update.wireBytes, positions: update.sent)
        if !update.isEmpty { spool.record(update) }
        gate?.spend(update.wireBytes, destination: destination)
    }

    /// Shows `state` in status (and what the link billed meanwhile, if anything).
    func record(_ state: DestinationState, error: String? = nil, nextAttemptMs: Int64? = nil) {
        var update = DeliveryUpdate(destination: destination)
        update.state = .init(state: state, lastError: error, nextAttemptMs: nextAttemptMs)
        record(update)
    }

    /// Positions whose wire cost fits in what is left of the uplink's budget (`.max`: no budget).
    func positionsFitting() -> Int {
        budgetWindow.positions(fitting: gate?.bytesLeft(for: destination), meter: meter)
    }
}

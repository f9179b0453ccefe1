import GeoRelayCore
import GeoRelaySpool

/// What the filter makes of one device's pending positions for one destination.
struct DevicePlan: Sendable {
    /// Positions skipped before the first one to send: settled at once.
    var leading: (ackThrough: Int64, state: FilterState)?
    var sends: [Delivery] = []
    /// Stored positions no encoder can carry (a field outside ``PositionBounds``, from a spool an
    /// older version wrote): quarantined with the reason, passed over like a filtered one.
    var unsendable: [(seq: Int64, reason: String)] = []

    /// Runs the filter over a device's positions in order.
    ///
    /// - Parameters:
    ///   - alreadySent: positions this destination had ahead of their backlog (alarms, current
    ///     and live fixes); not sent again, but filtered as in order.
    ///   - refused: positions the server refused when sent ahead, with why: quarantined here.
    ///   - traccarAttributes: add `motion` on stop changes, `archive=true` to
    ///     positions older than one the server already has, the key Traccar uses
    ///     for history a device recorded while it could not send, and `distance`: the
    ///     odometer's metres since the position Traccar measures from (its newest), which
    ///     Traccar's `DistanceHandler` takes instead of the straight line, so its
    ///     `totalDistance` follows the track, not the chord across an outage.
    init(
        _ positions: [StoredPosition], state initial: FilterState, filter: LocationFilter,
        alreadySent: Set<Int64> = [], refused: [Int64: String] = [:], traccarAttributes: Bool
    ) {
        var state = initial
        for stored in positions {
            if let problem = PositionBounds.problem(in: stored.position) {
                unsendable.append((stored.seq, "not sent: \(problem.message)"))
            } else if let reason = refused[stored.seq] {
                unsendable.append((stored.seq, reason))
            } else if !alreadySent.contains(stored.seq) {
                var position = stored.position
                let historic = state.newestSentMs.map { position.timeMs < $0 } ?? false
                // Counted from the server's newest (what Traccar's chain runs from), or for history
                // from the history sent before it (Traccar's is then from the newest: nothing is right).
                let distanceFrom = historic ? state.lastSentOdometer : state.newestSentOdometer
                let (decision, next) = filter.evaluate(position, state: state)
                state = next
                if case .send(let motion) = decision {
                    if traccarAttributes {
                        if let motion {
                            position.attributes.removeAll { $0.key == "motion" }
                            position.attributes.append(Attribute("motion", .bool(motion)))
                        }
                        if historic { position.attributes.append(Attribute("archive", .bool(true))) }
                        Self.setDistance(of: &position, from: distanceFrom)
                    }
                    var planned = stored
                    planned.position = position
                    sends.append(Delivery(stored: planned, ackThrough: stored.seq, stateAfter: state))
                    continue
                }
            } else {
                // Sent ahead (an alarm, a current or live fix): the filter's chain runs through it as
                // in order, so the backlog sends what the in-order filter sends, whatever went ahead
                // and when (one left out would let the next be judged against an older position).
                state = filter.evaluate(stored.position, state: state).1
            }
            if sends.isEmpty {
                leading = (stored.seq, state)
            } else {
                sends[sends.count - 1].ackThrough = stored.seq
                sends[sends.count - 1].stateAfter = state
            }
        }
    }

    /// Sets Traccar's `distance` attribute: the odometer's metres since `from` (an odometer), when
    /// both are known; a source's own `distance` gives way to it.
    static func setDistance(of position: inout Position, from: Double?) {
        guard let from, let odometer = position.odometer else { return }
        position.attributes.removeAll { $0.key == "distance" }
        position.attributes.append(Attribute("distance", .number(max(0, odometer - from))))
    }

    /// A position sent ahead of its backlog (an alarm, a current or still-alive one) that becomes
    /// the server's newest: its `distance` from the newest before it, so Traccar's `totalDistance`
    /// after an outage is the path sailed, not the chord across it.
    static func aheadWithDistance(_ delivery: Delivery) -> Delivery {
        let state = delivery.stateAfter
        guard delivery.stored.position.timeMs >= state.newestSentMs ?? .max else { return delivery }
        var delivery = delivery
        setDistance(of: &delivery.stored.position, from: state.newestSentOdometer)
        return delivery
    }
}

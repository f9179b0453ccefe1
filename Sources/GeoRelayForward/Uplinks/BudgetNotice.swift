import GeoRelayCore

/// What one forwarder has told the log and the spool about a spent uplink budget: the log hears
/// of each restriction once, and the destination's state reads `deferred` while it holds (the
/// recorder shows `online` for what is delivered, so a round that sent something is followed by
/// `deferred` again), and `online` once it lifts.
struct BudgetNotice {
    private var logged: String?
    private var recorded = false

    mutating func restricted(_ restriction: UplinkGate.Restriction, recorder: DeliveryRecorder, logger: Logger) {
        if logged != restriction.reason {
            logger.notice("backlog deferred: \(restriction.reason)")
            logged = restriction.reason
        }
        if !recorded {
            recorder.record(.deferred, error: restriction.reason)
            recorded = true
        }
    }

    /// A restricted round delivered something, and with it the engine's `online`.
    mutating func delivered() { recorded = false }

    /// No restriction now.
    mutating func lifted(recorder: DeliveryRecorder, logger: Logger) {
        guard logged != nil else { return }
        logger.notice(
            "backlog no longer deferred: the uplink's budget is free again, or another uplink carries the traffic")
        if recorded { recorder.record(.online) }
        logged = nil
        recorded = false
    }
}

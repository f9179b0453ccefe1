import GeoRelayCore

/// What one forwarder has told the log and the spool about a spent uplink budget: the log hears
/// of each restriction once, and the destination's state reads `deferred` while it holds (the
/// engines record `online` for what they deliver, so a round that sent something is followed by
/// `deferred` again), and `online` once it lifts.
struct BudgetNotice {
    private var logged: String?
    private var recorded = false

    mutating func restricted(_ restriction: UplinkGate.Restriction, link: DestinationLink, logger: Logger) {
        if logged != restriction.reason {
            logger.notice("backlog deferred: \(restriction.reason)")
            logged = restriction.reason
        }
        if !recorded {
            link.recordState(.deferred, error: restriction.reason, nextAttemptMs: nil)
            recorded = true
        }
    }

    /// A restricted round delivered something, and with it the engine's `online`.
    mutating func delivered() { recorded = false }

    /// No restriction now.
    mutating func lifted(link: DestinationLink, logger: Logger) {
        guard logged != nil else { return }
        logger.notice(
            "backlog no longer deferred: the uplink's budget is free again, or another uplink carries the traffic")
        if recorded { link.recordState(.online, error: nil, nextAttemptMs: nil) }
        logged = nil
        recorded = false
    }
}

import Synchronization

/// Several receivers on one vessel: positions from the best receiver that
/// reported within `failoverSeconds` become the device's; the others are kept
/// as each receiver's own history (stored, never forwarded), and a change of
/// receiver is logged.
///
/// It also holds each vessel's integrity watch (`IntegrityMonitor`): the receivers' fix cycles
/// go in through `observe`; a receiver the watch suspects is passed over while another is not;
/// while the vessel is not `ok` its positions carry `integrity`, and the first after an episode's
/// alarm carries Traccar's `jamming` or `tampering` alarm.
///
/// One router for every way positions come in (every `IngestSession`: the socket's
/// event loop and the phone listener's threads), since a device's sources may be a
/// collector and a phone at once.
package final class SourceRouter: Sendable {
    private struct Route {
        var device: Int
        var source: String
    }

    private struct State {
        var lastSeenMs: [String: Int64] = [:]
        var active: [Int: String] = [:]
        var monitors: [Int: IntegrityMonitor] = [:]
        /// The alarm the vessel's next forwarded position carries.
        var alarms: [Int: String] = [:]
        /// The newest fix time routed to each vessel: an alarm goes only on a newer one (the spool
        /// keeps one position per device and fix time, so an alarm on an older one could be lost).
        var newestRoutedMs: [Int: Int64] = [:]
        /// Vessels whose every present receiver is suspect, said once.
        var allSuspect: Set<Int> = []
    }

    private let devices: [Configuration.DeviceSources]
    private let routes: [String: Route]
    private let state: Mutex<State>
    private let logger: Logger
    /// Told each change of a vessel's state (the vessel's id and the change), outside the lock:
    /// the daemon keeps it in the spool for `status`, the page and the metrics.
    private let changed: (@Sendable (String, IntegrityMonitor.Transition) -> Void)?

    package init(
        devices: [Configuration.DeviceSources], logger: Logger,
        changed: (@Sendable (String, IntegrityMonitor.Transition) -> Void)? = nil
    ) {
        self.devices = devices
        self.logger = logger
        self.changed = changed
        var routes: [String: Route] = [:]
        var initial = State()
        for (index, device) in devices.enumerated() {
            for source in device.sources { routes[source] = Route(device: index, source: source) }
            if device.integrity.enabled { initial.monitors[index] = IntegrityMonitor(settings: device.integrity) }
        }
        self.routes = routes
        state = Mutex(initial)
    }

    /// Whether `source`'s fix cycles are worth watching: it feeds a vessel the relay judges.
    package func watches(_ source: String) -> Bool {
        routes[source].map { devices[$0.device].integrity.enabled } ?? false
    }

    /// One fix cycle of a receiver into its vessel's watch (the relay's monotonic time in it).
    package func observe(_ sample: GNSSSample) {
        guard let route = routes[sample.source] else { return }
        let transition = state.withLock { state -> IntegrityMonitor.Transition? in
            // In place: a copy out of the dictionary and back would copy the monitor's tracks each time.
            let transition = state.monitors[route.device]?.observe(sample) ?? nil
            if let transition, transition.alarm {
                state.alarms[route.device] = transition.to == .jammed ? "jamming" : "tampering"
            }
            if transition?.to == .ok { state.allSuspect.remove(route.device) }
            return transition
        }
        if let transition {
            log(transition, device: devices[route.device].id)
            changed?(devices[route.device].id, transition)
        }
    }

    /// The vessel's integrity state and the evidence standing, for status.
    package func integrity(of device: String, nowMs: Int64) -> (
        state: IntegrityState, evidence: [IntegrityEvidence], sinceMs: Int64?
    )? {
        guard let index = devices.firstIndex(where: { $0.id == device }) else { return nil }
        return state.withLock { state in
            state.monitors[index].map { ($0.state, $0.standing(atMs: nowMs), $0.episodeBeganMs) }
        }
    }

    /// For a receiver's position: the device's copy when this receiver is the active one.
    /// - Parameter nowMs: the monotonic clock (the session's, injected in tests), by which
    ///   silence is judged; never the wall clock, which a GPS-set clock may step.
    package func route(_ position: Position, nowMs: Int64) -> Position? {
        guard let route = routes[position.device] else { return nil }
        let device = devices[route.device]
        let window = Int64(device.failoverSeconds * 1000)
        let (best, previous, integrity, alarm, allSuspect) = state.withLock {
            state -> (String, String?, IntegrityState, String?, Bool) in
            state.lastSeenMs[route.source] = nowMs
            let present = device.sources.filter { nowMs - (state.lastSeenMs[$0] ?? .min / 2) <= window }
            let monitor = state.monitors[route.device]
            let suspects = monitor?.suspects(atMs: nowMs) ?? []
            let trusted = present.first { !suspects.contains($0) }
            let best = trusted ?? present.first ?? route.source
            let previous = state.active[route.device]
            state.active[route.device] = best
            var allSuspect = false
            if trusted == nil, !present.isEmpty {
                allSuspect = state.allSuspect.insert(route.device).inserted
            } else if trusted != nil {
                state.allSuspect.remove(route.device)
            }
            var alarm: String?
            if best == route.source {
                if position.timeMs > state.newestRoutedMs[route.device] ?? .min {
                    alarm = state.alarms.removeValue(forKey: route.device)
                }
                state.newestRoutedMs[route.device] = max(position.timeMs, state.newestRoutedMs[route.device] ?? .min)
            }
            return (best, previous, monitor?.state ?? .ok, alarm, allSuspect)
        }
        if let previous, previous != best {
            logger.notice("\(device.id): failover from \(previous) to \(best)")
        }
        if allSuspect {
            logger.warning("\(device.id): every receiver is suspect; forwarding \(best)'s positions, flagged")
        }
        guard best == route.source else { return nil }
        var copy = position
        copy.device = device.id
        copy.attributes.append(Attribute("source", .string(route.source)))
        if integrity != .ok { copy.attributes.append(Attribute("integrity", .string(integrity.rawValue))) }
        if let alarm { copy.alarm = copy.alarm.map { $0 + "," + alarm } ?? alarm }
        return copy
    }

    private func log(_ transition: IntegrityMonitor.Transition, device: String) {
        let evidence = transition.evidence.map(\.description).joined(separator: "; ")
        let text = "\(device): integrity \(transition.from.rawValue) → \(transition.to.rawValue)"
        if transition.to >= .jammed {
            logger.warning("\(text): \(evidence)\(transition.alarm ? " (alarm)" : "")")
        } else {
            logger.notice(evidence.isEmpty ? text : "\(text): \(evidence)")
        }
    }
}

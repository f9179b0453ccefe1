import Synchronization

/// Several receivers on one vessel: positions from the best receiver that
/// reported within `failoverSeconds` become the device's; the others are kept
/// as each receiver's own history (stored, never forwarded), and a change of
/// receiver is logged.
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
    }

    private let devices: [Configuration.DeviceSources]
    private let routes: [String: Route]
    private let state = Mutex(State())
    private let logger: Logger

    package init(devices: [Configuration.DeviceSources], logger: Logger) {
        self.devices = devices
        self.logger = logger
        var routes: [String: Route] = [:]
        for (index, device) in devices.enumerated() {
            for source in device.sources { routes[source] = Route(device: index, source: source) }
        }
        self.routes = routes
    }

    /// For a receiver's position: the device's copy when this receiver is the active one.
    /// - Parameter nowMs: the monotonic clock (the session's, injected in tests), by which
    ///   silence is judged; never the wall clock, which a GPS-set clock may step.
    package func route(_ position: Position, nowMs: Int64) -> Position? {
        guard let route = routes[position.device] else { return nil }
        let device = devices[route.device]
        let window = Int64(device.failoverSeconds * 1000)
        let (best, previous) = state.withLock { state -> (String, String?) in
            state.lastSeenMs[route.source] = nowMs
            let best = device.sources.first { nowMs - (state.lastSeenMs[$0] ?? .min / 2) <= window } ?? route.source
            let previous = state.active[route.device]
            state.active[route.device] = best
            return (best, previous)
        }
        if let previous, previous != best {
            logger.notice("\(device.id): failover from \(previous) to \(best)")
        }
        guard best == route.source else { return nil }
        var copy = position
        copy.device = device.id
        copy.attributes.append(Attribute("source", .string(route.source)))
        return copy
    }
}

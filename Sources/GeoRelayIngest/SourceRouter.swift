import GeoRelayCore

/// Several receivers on one vessel: positions from the best receiver that
/// reported within `failoverSeconds` become the device's; the others are kept
/// as each receiver's own history (stored, never forwarded), and a change of
/// receiver is logged.
struct SourceRouter {
    private struct Route {
        var device: Int
        var source: String
    }

    private let devices: [Configuration.DeviceSources]
    private let routes: [String: Route]
    private var lastSeenMs: [String: Int64] = [:]
    private var active: [Int: String] = [:]
    private let logger: Logger

    init(devices: [Configuration.DeviceSources], logger: Logger) {
        self.devices = devices
        self.logger = logger
        var routes: [String: Route] = [:]
        for (index, device) in devices.enumerated() {
            for source in device.sources { routes[source] = Route(device: index, source: source) }
        }
        self.routes = routes
    }

    /// For a receiver's position: the device's copy when this receiver is the active one.
    mutating func route(_ position: Position, nowMs: Int64 = WallClock.monotonicMs()) -> Position? {
        guard let route = routes[position.device] else { return nil }
        lastSeenMs[route.source] = nowMs
        let device = devices[route.device]
        let window = Int64(device.failoverSeconds * 1000)
        let best = device.sources.first { nowMs - (lastSeenMs[$0] ?? .min / 2) <= window } ?? route.source
        if active[route.device] != best {
            if let previous = active[route.device] {
                logger.notice("\(device.id): failover from \(previous) to \(best)")
            }
            active[route.device] = best
        }
        guard best == route.source else { return nil }
        var copy = position
        copy.device = device.id
        copy.attributes.append(Attribute("source", .string(route.source)))
        return copy
    }
}

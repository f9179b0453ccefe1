/// Which positions a destination gets: the Traccar client SDK's `LocationConfig`
/// rules, applied per destination after the spool (which keeps everything).
package struct FilterSettings: Sendable, Equatable {
    package enum Mode: String, Sendable, CaseIterable {
        /// The rules below decide.
        case filtered
        /// Every position (the SDK's HIGHEST accuracy, navigation-style).
        case all
    }

    /// Accept when this far (great circle) from the last position sent; 0 disables.
    package var distanceMeters = 75.0
    /// Accept when this long since the last position sent; 0 disables.
    package var intervalSeconds = 300.0
    /// Accept when the course turned this much since the last position sent; 0 disables.
    package var angleDegrees = 0.0
    package var stopDetection = true
    package var stopTimeoutSeconds = 60.0
    package var stationaryRadiusMeters = 100.0
    /// While stopped, still send the newest position this often; 0 disables.
    package var heartbeatIntervalSeconds = 0.0
    package var mode = Mode.filtered

    package init() {}
}

extension FilterSettings {
    /// Reads a destination's `filter` object; negative values are refused naming the key.
    static func read(_ node: inout ConfigNode, defaults: FilterSettings) throws(ConfigError) -> FilterSettings {
        var filter = defaults
        func nonNegative(_ key: String, _ fallback: Double, code: String? = nil) throws(ConfigError) -> Double {
            guard let value = node.value(key) else { return fallback }
            guard case .number(let n) = value, n.isFinite, n >= 0 else {
                let prefix = code.map { "\($0): " } ?? ""
                throw ConfigError(path: node.child(key), "\(prefix)expected a number, 0 or more, got \(value.kindName == "a number" ? "a negative number" : value.kindName)")
            }
            return n
        }
        filter.distanceMeters = try nonNegative("distanceMeters", filter.distanceMeters, code: "INVALID_DISTANCE_FILTER")
        filter.intervalSeconds = try nonNegative("intervalSeconds", filter.intervalSeconds)
        filter.angleDegrees = try nonNegative("angleDegrees", filter.angleDegrees)
        filter.stopDetection = try node.bool("stopDetection", default: filter.stopDetection)
        filter.stopTimeoutSeconds = try nonNegative("stopTimeoutSeconds", filter.stopTimeoutSeconds)
        filter.stationaryRadiusMeters = try nonNegative("stationaryRadiusMeters", filter.stationaryRadiusMeters)
        filter.heartbeatIntervalSeconds = try nonNegative("heartbeatIntervalSeconds", filter.heartbeatIntervalSeconds)
        filter.mode = try node.choice("mode", default: filter.mode)
        try node.finish()
        return filter
    }
}

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
    /// The SDK's accuracy level: fixes worse than its bound are not sent; nil: no bound.
    package var accuracy: Accuracy?
    /// Metres per unit of HDOP (`ingest.nmea.hdopAccuracyMeters`), for positions that carry
    /// an `hdop` attribute but no accuracy; nil: such positions are not judged.
    package var accuracyPerHDOP: Double?

    /// The Traccar client SDK's accuracy levels, with the bounds of the iOS client's
    /// `desiredAccuracy` for each (Best, NearestTenMeters, HundredMeters, Kilometer). `highest`
    /// is the navigation level: every fix, as `mode: "all"`.
    package enum Accuracy: String, Sendable, CaseIterable {
        case highest, high, medium, low

        /// The worst horizontal accuracy (metres) still sent; nil: every fix.
        package var boundMeters: Double? {
            switch self {
            case .highest: nil
            case .high: 10
            case .medium: 100
            case .low: 1000
            }
        }
    }

    package init() {}
}

extension FilterSettings {
    /// Reads a destination's `filter` object; negative values are refused naming the key.
    static func read(_ node: inout ConfigNode, defaults: FilterSettings) throws(ConfigError) -> FilterSettings {
        var filter = defaults
        func nonNegative(_ key: String, _ fallback: Double, code: String? = nil) throws(ConfigError) -> Double {
            guard let value = node.value(key) else { return fallback }
            guard case .number(let n) = value, n.isFinite, n >= 0, n <= ConfigNode.largestNumber else {
                let prefix = code.map { "\($0): " } ?? ""
                throw ConfigError(
                    path: node.child(key),
                    "\(prefix)expected a number, 0 or more, got \(value.kindName == "a number" ? "a number outside 0...1e12" : value.kindName)"
                )
            }
            return n
        }
        filter.distanceMeters = try nonNegative(
            "distanceMeters", filter.distanceMeters, code: "INVALID_DISTANCE_FILTER")
        filter.intervalSeconds = try nonNegative("intervalSeconds", filter.intervalSeconds)
        filter.angleDegrees = try nonNegative("angleDegrees", filter.angleDegrees)
        filter.stopDetection = try node.bool("stopDetection", default: filter.stopDetection)
        filter.stopTimeoutSeconds = try nonNegative("stopTimeoutSeconds", filter.stopTimeoutSeconds)
        filter.stationaryRadiusMeters = try nonNegative("stationaryRadiusMeters", filter.stationaryRadiusMeters)
        filter.heartbeatIntervalSeconds = try nonNegative("heartbeatIntervalSeconds", filter.heartbeatIntervalSeconds)
        let explicitMode = node.value("mode") != nil
        filter.mode = try node.choice("mode", default: filter.mode)
        if node.value("accuracy") != nil {
            let accuracy: Accuracy = try node.choice("accuracy", default: .highest)
            // `highest` is the navigation level (every fix); the others thin by the rules as well.
            let implied: Mode = accuracy == .highest ? .all : .filtered
            if explicitMode, filter.mode != implied {
                throw ConfigError(
                    path: node.child("accuracy"),
                    "\"\(accuracy.rawValue)\" means mode \"\(implied.rawValue)\", but mode is \"\(filter.mode.rawValue)\": give one of the two"
                )
            }
            filter.accuracy = accuracy
            filter.mode = implied
        }
        try node.finish()
        return filter
    }
}

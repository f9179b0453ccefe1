import GeoRelayCore

/// What Traccar makes of the positions a fake server took, in the order they arrived: its
/// latest position per device, which positions its event handlers skip, its `distance` and
/// `totalDistance` chain, and its reports' distances. Built from Traccar's source (commit
/// 9e5c458, v6.14.5-116), not from what the relay means to send:
///
/// - `ProcessingHandler`: a device's positions are processed one at a time, in arrival order,
///   after `BufferingManager` (`server.buffering.threshold`, 3,000 ms by default since 6.9;
///   older servers and `0`: none), which holds each position for the threshold and sorts the
///   held ones by fix time, restarting the wait of every held position that sorts after a
///   newcomer.
/// - `DistanceHandler` (before the filter): `distance` is the position's own `distance`
///   attribute when it has one, else the haversine (radius 6,378,137 m, no rounding) from the
///   cached latest; `totalDistance` = the latest's `totalDistance` + `distance`.
/// - `BasePositionEventHandler.onPosition`: every event handler but media and command results
///   skips a position whose fix time is before the cached latest's (alarms too at HEAD; 6.14.5's
///   `AlarmEventHandler` did not skip). `AlarmEventHandler` drops alarms the latest also
///   carried (`event.ignoreDuplicateAlerts`, default true).
/// - `PostProcessHandler`: a position whose fix time is not before the latest's becomes the
///   latest (`>=`: an equal one replaces it).
/// - `PositionUtil.calculateDistance`, the summary and trips reports: first and last position
///   by fix time within the period; `last.odometer − first.odometer` when both carry a non-zero
///   `odometer` and `report.ignoreOdometer` is false (the default), else the `totalDistance`
///   difference.
///
/// Filters (`FilterHandler`) are all off by default but `filter.future`, which no test's
/// position trips; the `coordinates.filter` of `DistanceHandler` is off by default.
package struct TraccarModel: Sendable {
    /// One position as it reached the server.
    package struct Arrival: Sendable {
        package var device: String
        package var fixTimeMs: Int64
        package var lat: Double
        package var lon: Double
        package var attributes: [String: AttributeValue]
        /// When it arrived (wall clock), for the buffering.
        package var arrivalMs: Int64

        package init(
            device: String, fixTimeMs: Int64, lat: Double, lon: Double, attributes: [String: AttributeValue],
            arrivalMs: Int64
        ) {
            self.device = device
            self.fixTimeMs = fixTimeMs
            self.lat = lat
            self.lon = lon
            self.attributes = attributes
            self.arrivalMs = arrivalMs
        }

        package init(_ stored: some TraccarStoredPosition) {
            self.init(
                device: stored.uniqueId, fixTimeMs: stored.fixTimeMs, lat: stored.lat, lon: stored.lon,
                attributes: stored.attributes, arrivalMs: stored.arrivalMs)
        }

        var alarms: Set<String> {
            guard case .string(let text)? = attributes["alarm"] else { return [] }
            return Set(text.split(separator: ",").map(String.init))
        }

        func number(_ key: String) -> Double? {
            switch attributes[key] {
            case .number(let n)?: n
            case .string(let s)?: Double(s)
            default: nil
            }
        }
    }

    /// A position as Traccar stored it.
    package struct Processed: Sendable {
        package var arrival: Arrival
        package var distance: Double
        package var totalDistance: Double
        /// The event handlers skipped it: older than the device's latest when it was processed.
        package var skippedByEvents: Bool
        /// A fix time of the device processed before: sent again after an answer was lost.
        package var duplicate: Bool
        /// Alarm events it raised.
        package var alarmEvents: Set<String>
    }

    /// What a device's positions came to.
    package struct Device: Sendable {
        /// In the order Traccar processed them.
        package var processed: [Processed] = []
        /// The latest position (`device.positionId`).
        package var latest: Processed?
        /// The fix times processed so far, to tell a copy sent again from a first arrival.
        var seenFixTimes: Set<Int64> = []

        /// Positions the event handlers skipped: no geofence, overspeed, motion, ignition,
        /// driver, maintenance or alarm event could come of them.
        package var skippedByEvents: Int { processed.count { $0.skippedByEvents } }
        /// As `skippedByEvents`, only the first arrival of each fix time: what the relay can know it
        /// sent behind a newer one (a copy sent again after a lost answer is skipped too when the
        /// copies of newer ones got there before it, and the relay cannot know they did).
        package var firstArrivalsSkipped: Int { processed.count { $0.skippedByEvents && !$0.duplicate } }
        /// Alarms carried by positions the event handlers skipped: events lost.
        package var alarmsSkipped: Int {
            processed.filter(\.skippedByEvents).reduce(0) { $0 + $1.arrival.alarms.count }
        }

        /// The summary report's distance over `fromMs...toMs`, as `calculateDistance` gives it.
        package func reportDistance(fromMs: Int64, toMs: Int64, ignoreOdometer: Bool = false) -> Double? {
            let inPeriod = processed.filter { (fromMs...toMs).contains($0.arrival.fixTimeMs) }
            guard let first = inPeriod.min(by: { $0.arrival.fixTimeMs < $1.arrival.fixTimeMs }),
                let last = inPeriod.max(by: { $0.arrival.fixTimeMs < $1.arrival.fixTimeMs })
            else { return nil }
            let (a, b) = (first.arrival.number("odometer") ?? 0, last.arrival.number("odometer") ?? 0)
            if !ignoreOdometer, a != 0, b != 0 { return b - a }
            return last.totalDistance - first.totalDistance
        }
    }

    package private(set) var devices: [String: Device] = [:]

    /// `server.buffering.threshold` in milliseconds; 0: none (before Traccar 6.9, or turned off).
    package init(_ arrivals: [Arrival], bufferingMs: Int64 = 0) {
        var byDevice: [String: [Arrival]] = [:]
        for arrival in arrivals { byDevice[arrival.device, default: []].append(arrival) }
        for (name, arrivals) in byDevice {
            var device = Device()
            for arrival in Self.released(arrivals, bufferingMs: bufferingMs) { device.process(arrival) }
            devices[name] = device
        }
    }

    /// Positions the event handlers skipped, over every device.
    package var skippedByEvents: Int { devices.values.reduce(0) { $0 + $1.skippedByEvents } }
    package var firstArrivalsSkipped: Int { devices.values.reduce(0) { $0 + $1.firstArrivalsSkipped } }
    package var alarmsSkipped: Int { devices.values.reduce(0) { $0 + $1.alarmsSkipped } }

    /// `BufferingManager`: the order a device's positions leave the buffer. Each is held
    /// `bufferingMs` after it arrives; a newcomer that sorts before held ones restarts their wait.
    static func released(_ arrivals: [Arrival], bufferingMs: Int64) -> [Arrival] {
        guard bufferingMs > 0 else { return arrivals }
        var held: [(arrival: Arrival, releaseMs: Int64)] = []
        var out: [Arrival] = []
        func release(before timeMs: Int64) {
            // Due ones leave in order of their release time (ties: fix time).
            while let next = held.indices.min(by: {
                (held[$0].releaseMs, held[$0].arrival.fixTimeMs) < (held[$1].releaseMs, held[$1].arrival.fixTimeMs)
            }), held[next].releaseMs <= timeMs {
                out.append(held.remove(at: next).arrival)
            }
        }
        for arrival in arrivals {
            release(before: arrival.arrivalMs)
            let releaseMs = arrival.arrivalMs + bufferingMs
            for index in held.indices where held[index].arrival.fixTimeMs > arrival.fixTimeMs {
                held[index].releaseMs = releaseMs
            }
            held.append((arrival, releaseMs))
        }
        release(before: .max)
        return out
    }
}

extension TraccarModel.Device {
    /// Equatorial radius, as Traccar's `DistanceCalculator` has it.
    static let earthRadius = 6_378_137.0

    mutating func process(_ arrival: TraccarModel.Arrival) {
        let last = latest
        var distance = arrival.number("distance") ?? 0
        var total = 0.0
        if let last {
            total = last.totalDistance
            if arrival.attributes["distance"] == nil {
                distance =
                    Geo.distance(lat1: arrival.lat, lon1: arrival.lon, lat2: last.arrival.lat, lon2: last.arrival.lon)
                    * Self.earthRadius / Geo.earthRadiusMeters
            }
        }
        let old = last.map { arrival.fixTimeMs < $0.arrival.fixTimeMs } ?? false
        let alarmEvents = old ? [] : arrival.alarms.subtracting(last?.arrival.alarms ?? [])
        let duplicate = !seenFixTimes.insert(arrival.fixTimeMs).inserted
        let processed = TraccarModel.Processed(
            arrival: arrival, distance: distance, totalDistance: total + distance, skippedByEvents: old,
            duplicate: duplicate, alarmEvents: alarmEvents)
        self.processed.append(processed)
        if !old { latest = processed }
    }
}

/// A fake server's stored position, as the model reads it.
package protocol TraccarStoredPosition {
    var uniqueId: String { get }
    var fixTimeMs: Int64 { get }
    var lat: Double { get }
    var lon: Double { get }
    var attributes: [String: AttributeValue] { get }
    var arrivalMs: Int64 { get }
}

/// What one destination remembers about one device between positions.
///
/// Persisted in the spool with the destination's cursor, so a restart neither
/// floods the uplink with an unfiltered burst nor forgets a stop.
package struct FilterState: Sendable, Equatable {
    /// The last position sent: its fix time, place and course.
    package var lastSentMs: Int64?
    package var lastSentLat = 0.0
    package var lastSentLon = 0.0
    package var lastSentCourse: Double?
    /// The newest fix time sent: anything older that follows is history to the server.
    package var newestSentMs: Int64?
    /// The odometers (`Position.odometer`) of the last position sent and of the newest: what
    /// the `distance` Traccar chains is counted from (`DevicePlan`). nil: it carried none.
    package var lastSentOdometer: Double?
    package var newestSentOdometer: Double?
    /// Stop detection: where the device has stayed since when, and whether that made it stopped.
    package var anchorLat: Double?
    package var anchorLon: Double?
    package var anchorSinceMs: Int64 = 0
    package var stopped = false

    package init() {}

    /// `position` was sent: when no newer fix was, it is the server's newest.
    package mutating func markNewest(_ position: Position) {
        guard position.timeMs >= newestSentMs ?? .min else { return }
        newestSentMs = position.timeMs
        newestSentOdometer = position.odometer
    }
}

/// Whether a destination gets a position.
package enum FilterDecision: Sendable, Equatable {
    /// Send it; `motion` is set when stop detection changed its mind with this position.
    case send(motion: Bool?)
    case skip
}

/// The Traccar client SDK's location rules, per destination: a position is
/// sent when ANY rule holds (distance, interval, course change), always when
/// it is the device's first, an alarm, or a change of stop state, and while
/// the device is stopped only as a heartbeat.
///
/// Stop detection anchors on a position and calls the device stopped once its
/// positions have stayed within `stationaryRadiusMeters` of that anchor for
/// `stopTimeoutSeconds`; jitter inside the radius never counts as movement, so
/// a receiver wandering 20–40 m around a mooring is one stop. Leaving the
/// radius ends the stop at once. A collector's explicit `motion` wins. Times
/// are fix times, so the decisions are the same whenever they are made.
package struct LocationFilter: Sendable {
    package let settings: FilterSettings

    package init(settings: FilterSettings) {
        self.settings = settings
    }

    /// Decides over one device's positions in fix-time order, from a fresh memory, as the
    /// destination would have: what `georelay replay` queues through a destination's filter.
    package func replayChoice() -> (Position) -> Bool {
        var state = FilterState()
        return { position in
            let (decision, next) = evaluate(position, state: state)
            state = next
            if case .send = decision { return true }
            return false
        }
    }

    package func evaluate(_ position: Position, state: FilterState) -> (FilterDecision, FilterState) {
        // Below the destination's accuracy level: not sent and no part of the filter's memory
        // (a bad fix neither anchors a stop nor counts as the last one sent). Alarms always go.
        if !accurateEnough(position) {
            return (.skip, state)
        }
        var next = state
        let changed = settings.stopDetection ? detectStop(position, state: &next) : nil
        let decision: FilterDecision
        if position.alarm != nil || settings.mode == .all || state.lastSentMs == nil || changed != nil {
            decision = .send(motion: changed)
        } else if next.stopped {
            decision = heartbeatDue(position, state) ? .send(motion: nil) : .skip
        } else {
            decision = rulesHold(position, state) ? .send(motion: nil) : .skip
        }
        if case .send = decision {
            next.lastSentMs = position.timeMs
            next.lastSentLat = position.lat
            next.lastSentLon = position.lon
            next.lastSentCourse = position.course ?? state.lastSentCourse
            next.lastSentOdometer = position.odometer
            next.markNewest(position)
        }
        return (decision, next)
    }

    /// Whether the destination's accuracy level takes the fix (alarms always; a fix with neither
    /// accuracy nor HDOP is not judged): what a position sent ahead of its backlog must pass too.
    package func accurateEnough(_ position: Position) -> Bool {
        guard position.alarm == nil, let bound = settings.accuracy?.boundMeters,
            let metres = horizontalAccuracy(position)
        else { return true }
        return metres <= bound
    }

    /// A fix's horizontal accuracy in metres: its own, or its HDOP times the configured UERE;
    /// nil when neither is known (such a fix is not judged).
    private func horizontalAccuracy(_ p: Position) -> Double? {
        if let accuracy = p.accuracy { return accuracy }
        guard let perHDOP = settings.accuracyPerHDOP,
            case .number(let hdop)? = p.attributes.last(where: { $0.key == "hdop" })?.value
        else { return nil }
        return hdop * perHDOP
    }

    /// Updates the stop state; returns the new motion value when it changed.
    private func detectStop(_ p: Position, state: inout FilterState) -> Bool? {
        if let explicit = p.attributes.last(where: { $0.key == "motion" })?.value, case .bool(let moving) = explicit {
            let changed = moving == state.stopped
            state.stopped = !moving
            state.anchorLat = p.lat
            state.anchorLon = p.lon
            state.anchorSinceMs = p.timeMs
            return changed ? moving : nil
        }
        guard let anchorLat = state.anchorLat, let anchorLon = state.anchorLon else {
            state.anchorLat = p.lat
            state.anchorLon = p.lon
            state.anchorSinceMs = p.timeMs
            return nil
        }
        if Geo.distance(lat1: anchorLat, lon1: anchorLon, lat2: p.lat, lon2: p.lon) <= settings.stationaryRadiusMeters {
            if !state.stopped,
                p.timeMs.saturatingMinus(state.anchorSinceMs) >= Int64(settings.stopTimeoutSeconds * 1000)
            {
                state.stopped = true
                return false
            }
            return nil
        }
        state.anchorLat = p.lat
        state.anchorLon = p.lon
        state.anchorSinceMs = p.timeMs
        if state.stopped {
            state.stopped = false
            return true
        }
        return nil
    }

    private func heartbeatDue(_ p: Position, _ state: FilterState) -> Bool {
        guard settings.heartbeatIntervalSeconds > 0, let last = state.lastSentMs else { return false }
        return p.timeMs.saturatingMinus(last) >= Int64(settings.heartbeatIntervalSeconds * 1000)
    }

    private func rulesHold(_ p: Position, _ state: FilterState) -> Bool {
        guard let last = state.lastSentMs else { return true }
        if settings.distanceMeters > 0,
            Geo.distance(lat1: state.lastSentLat, lon1: state.lastSentLon, lat2: p.lat, lon2: p.lon)
                >= settings.distanceMeters
        {
            return true
        }
        if settings.intervalSeconds > 0, p.timeMs.saturatingMinus(last) >= Int64(settings.intervalSeconds * 1000) {
            return true
        }
        if settings.angleDegrees > 0, let course = p.course, let lastCourse = state.lastSentCourse,
            Geo.courseChange(course, lastCourse) >= settings.angleDegrees
        {
            return true
        }
        return false
    }
}

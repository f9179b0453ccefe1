import GeoRelayCore

/// What the status page draws besides `status`'s figures: each destination's 24-hour chart and
/// each device's newest fix and recent track.
///
/// Every read here costs the same however long the backlog: the chart's table is bounded
/// (`ChartSample.perDestination`), and a track is at most `maxPoints` index seeks on
/// `positions_fix`, not a scan of the positions in its window (a 10 Hz receiver stores 216,000
/// in six hours).
extension SpoolReader {
    /// A device's newest fix and where it was.
    package struct Fix: Sendable, Equatable {
        package var timeMs: Int64
        package var lat: Double
        package var lon: Double
        package var speed: Double?
        package var course: Double?
    }

    /// Every destination's chart samples, oldest first, by destination.
    package func chartSamples() throws(SpoolError) -> [String: [ChartSample]] {
        try wrap {
            let select = try db.statement("SELECT destination, time_ms, pending, wire_bytes FROM chart_samples ORDER BY destination, time_ms")
            var samples: [String: [ChartSample]] = [:]
            while try select.step() {
                let destination = select.text(0) ?? ""
                samples[destination, default: []].append(ChartSample(destination: destination, timeMs: select.int64(1),
                                                                     pending: select.int(2), wireBytes: select.int64(3)))
            }
            return samples
        }
    }

    /// The newest fix of the device named `device` (by fix time), nil when it has none.
    package func newestFix(device: String) throws(SpoolError) -> Fix? {
        try wrap {
            let select = try db.statement("""
                SELECT fix_ms, lat, lon, speed, course FROM positions
                WHERE device_id = (SELECT id FROM devices WHERE name = ?) ORDER BY fix_ms DESC LIMIT 1
                """)
            select.bind(1, device)
            guard try select.step() else { return nil }
            return Fix(timeMs: select.int64(0), lat: select.double(1), lon: select.double(2),
                       speed: select.optionalDouble(3), course: select.optionalDouble(4))
        }
    }

    /// A device's track from `sinceMs` to `untilMs`, thinned to at most `maxPoints` fixes spread
    /// evenly in time (the first fix at or after each step), oldest first.
    package func track(device: String, sinceMs: Int64, untilMs: Int64, maxPoints: Int = 500) throws(SpoolError) -> [Fix] {
        try wrap {
            guard maxPoints > 0, untilMs >= sinceMs else { return [] }
            let id = try db.statement("SELECT id FROM devices WHERE name = ?")
            id.bind(1, device)
            guard try id.step() else { return [] }
            let deviceID = id.int64(0)
            let seek = try db.statement("""
                SELECT fix_ms, lat, lon, speed, course FROM positions
                WHERE device_id = ? AND fix_ms >= ? AND fix_ms <= ? ORDER BY fix_ms LIMIT 1
                """)
            let step = max(1, (untilMs - sinceMs) / Int64(maxPoints))
            var points: [Fix] = []
            var from = sinceMs
            while points.count < maxPoints, from <= untilMs {
                seek.reset()
                seek.bind(1, deviceID)
                seek.bind(2, from)
                seek.bind(3, untilMs)
                guard try seek.step() else { break }
                let fix = Fix(timeMs: seek.int64(0), lat: seek.double(1), lon: seek.double(2),
                              speed: seek.optionalDouble(3), course: seek.optionalDouble(4))
                points.append(fix)
                // The next step's start after this fix: one fix per step, and a gap in the track
                // costs one seek, not one per empty step.
                from = sinceMs + ((fix.timeMs - sinceMs) / step + 1) * step
            }
            return points
        }
    }
}

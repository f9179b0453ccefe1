import GeoRelayCore

/// What the status page draws besides `status`'s figures: each destination's 24-hour chart and
/// each device's newest fix and recent track.
///
/// Every read here costs the same however long the backlog: the chart's table is bounded
/// (`ChartSample.perDestination`), and a track is at most `maxPoints` index seeks on
/// `positions_fix`, not a scan of the positions in its window (a 10 Hz receiver stores 216,000
/// in six hours), plus one scan of the small `recent` table.
extension SpoolReader {
    /// A device's newest fix and where it was.
    package struct Fix: Sendable, Equatable {
        package var timeMs: Int64
        package var lat: Double
        package var lon: Double
        package var speed: Double?
        package var course: Double?
        /// Metres along the device's track (`Odometer`); nil for a fix stored before it existed.
        package var odometer: Double? = nil
    }

    /// Every destination's chart samples, oldest first, by destination.
    package func chartSamples() throws(SpoolError) -> [String: [ChartSample]] {
        try wrap {
            let select = try db.statement(
                "SELECT destination, time_ms, pending, wire_bytes FROM chart_samples ORDER BY destination, time_ms")
            var samples: [String: [ChartSample]] = [:]
            while try select.step() {
                let destination = select.text(0) ?? ""
                samples[destination, default: []].append(
                    ChartSample(
                        destination: destination, timeMs: select.int64(1),
                        pending: select.int(2), wireBytes: select.int64(3)))
            }
            return samples
        }
    }

    /// The newest fix of the device named `device` (by fix time), nil when it has none.
    package func newestFix(device: String) throws(SpoolError) -> Fix? {
        try wrap {
            let select = try db.statement(
                Self.bothTables(
                    """
                    SELECT fix_ms, lat, lon, speed, course, odometer FROM %TABLE WHERE device_id = (SELECT id FROM devices WHERE name = ?1)
                    """, then: "ORDER BY fix_ms DESC LIMIT 1"))
            select.bind(1, device)
            guard try select.step() else { return nil }
            return Self.fix(select)
        }
    }

    /// A device's track from `sinceMs` to `untilMs`, thinned to at most `maxPoints` fixes spread
    /// evenly in time (the first fix in each of `maxPoints` equal steps), oldest first.
    ///
    /// `positions` is searched with one index seek per step; `recent` (at most a few thousand
    /// rows, no index) is read once and merged in, both in one read transaction so that a move
    /// from one table to the other between two statements hides nothing.
    package func track(device: String, sinceMs: Int64, untilMs: Int64, maxPoints: Int = 500) throws(SpoolError) -> [Fix]
    {
        guard maxPoints > 0, untilMs >= sinceMs else { return [] }
        return try inReadTransaction {
            let id = try db.statement("SELECT id FROM devices WHERE name = ?")
            id.bind(1, device)
            guard try id.step() else { return [] }
            let deviceID = id.int64(0)
            let step = max(1, (untilMs - sinceMs) / Int64(maxPoints))
            func bucket(_ timeMs: Int64) -> Int64 { (timeMs - sinceMs) / step }
            let seek = try db.statement(
                """
                SELECT fix_ms, lat, lon, speed, course, odometer FROM positions
                WHERE device_id = ? AND fix_ms >= ? AND fix_ms <= ? ORDER BY fix_ms LIMIT 1
                """)
            var candidates: [Fix] = []
            var from = sinceMs
            while candidates.count < maxPoints, from <= untilMs {
                seek.reset()
                seek.bind(1, deviceID)
                seek.bind(2, from)
                seek.bind(3, untilMs)
                guard try seek.step() else { break }
                let fix = Self.fix(seek)
                candidates.append(fix)
                // The next step's start after this fix: one fix per step, and a gap in the track
                // costs one seek, not one per empty step.
                // Saturating: a fix stored near the end of time (an older spool's) ends the loop, not the relay.
                let (offset, overflow) = (bucket(fix.timeMs) + 1).multipliedReportingOverflow(by: step)
                guard !overflow, case let next = sinceMs.saturatingPlus(offset), next != .max else { break }
                from = next
            }
            let recent = try db.statement(
                """
                SELECT fix_ms, lat, lon, speed, course, odometer FROM recent WHERE device_id = ? AND fix_ms >= ? AND fix_ms <= ? ORDER BY fix_ms
                """)
            recent.bind(1, deviceID)
            recent.bind(2, sinceMs)
            recent.bind(3, untilMs)
            while try recent.step() { candidates.append(Self.fix(recent)) }
            var points: [Fix] = []
            for fix in candidates.sorted(by: { $0.timeMs < $1.timeMs })
            where points.last.map({ bucket($0.timeMs) < bucket(fix.timeMs) }) ?? true {
                points.append(fix)
            }
            return Array(points.prefix(maxPoints))
        }
    }

    private static func fix(_ s: SQLiteStatement) -> Fix {
        Fix(
            timeMs: s.int64(0), lat: s.double(1), lon: s.double(2), speed: s.optionalDouble(3),
            course: s.optionalDouble(4), odometer: s.optionalDouble(5))
    }
}

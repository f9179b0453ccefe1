import GeoRelayCore

/// One point of a destination's 24-hour chart on the status page: its backlog and the wire
/// bytes it had used so far (the chart draws the difference between two samples).
package struct ChartSample: Sendable, Equatable {
    package var destination: String
    package var timeMs: Int64
    package var pending: Int
    /// The destination's `wire_bytes` counter at `timeMs` (bytes sent and received, ever).
    package var wireBytes: Int64

    package init(destination: String, timeMs: Int64, pending: Int, wireBytes: Int64) {
        self.destination = destination
        self.timeMs = timeMs
        self.pending = pending
        self.wireBytes = wireBytes
    }

    /// Samples kept per destination: 24 hours at one every 5 minutes.
    package static let perDestination = 288
    /// Samples older than this (behind the newest) are deleted, a removed destination's too.
    package static let keptMs: Int64 = 24 * 3600 * 1000
}

/// The chart's table stays bounded in the transaction that grows it: each write deletes what
/// fell out of the 24 hours and anything beyond `perDestination`, so no maintenance pass is
/// needed and a clock set back cannot grow it either.
extension SpoolStore {
    func insert(_ samples: [ChartSample]) throws {
        guard let newest = samples.map(\.timeMs).max() else { return }
        let insert = try db.statement(
            "INSERT OR REPLACE INTO chart_samples(destination, time_ms, pending, wire_bytes) VALUES(?, ?, ?, ?)")
        for sample in samples {
            try insert.run(with: sample.destination, sample.timeMs, Int64(sample.pending), sample.wireBytes)
        }
        let expired = try db.statement("DELETE FROM chart_samples WHERE time_ms < ? OR time_ms > ?")
        // Samples "from the future" are a clock that was set back: they would hide the new ones.
        try expired.run(with: newest - ChartSample.keptMs, newest)
        let excess = try db.statement(
            """
            DELETE FROM chart_samples WHERE destination = ?1 AND time_ms <
                (SELECT time_ms FROM chart_samples WHERE destination = ?1 ORDER BY time_ms DESC LIMIT 1 OFFSET ?2)
            """)
        for destination in Set(samples.map(\.destination)) {
            try excess.run(with: destination, Int64(ChartSample.perDestination - 1))
        }
    }
}

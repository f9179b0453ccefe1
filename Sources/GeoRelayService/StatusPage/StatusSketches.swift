import GeoRelayCore
import GeoRelaySpool

/// What the status page draws beyond `status`'s figures, read with the same report so that
/// `georelay status --json` and the page's `/status.json` stay one object: each destination's
/// 24-hour chart, each device's newest fix and recent track, and the newest diagnostic log
/// entries. Keys and shapes are documented in the README (Status page).
///
/// Unreadable parts (a spool from before the chart's table, a failed read) are left out rather
/// than failing `status`: they are pictures, not figures an operator's script depends on.
package struct StatusSketches: Sendable {
    /// How far back a device's track goes, from its newest fix.
    package static let trackHours = 6
    /// Points in a track at most, however many fixes the window holds.
    package static let maxTrackPoints = 500
    /// Newest diagnostic log entries shown.
    package static let logEntries = 12

    package var charts: [String: [ChartSample]] = [:]
    package var fixes: [String: SpoolReader.Fix] = [:]
    package var tracks: [String: [SpoolReader.Fix]] = [:]
    package var log: [LogEntry] = []

    package init() {}

    package static func read(reader: SpoolReader, devices: [String]) -> StatusSketches {
        var sketches = StatusSketches()
        sketches.charts = (try? reader.chartSamples()) ?? [:]
        for device in devices {
            guard let fix = try? reader.newestFix(device: device) else { continue }
            sketches.fixes[device] = fix
            let since = fix.timeMs - Int64(trackHours) * 3600 * 1000
            sketches.tracks[device] = (try? reader.track(device: device, sinceMs: since, untilMs: fix.timeMs, maxPoints: maxTrackPoints)) ?? []
        }
        sketches.log = (try? reader.logEntries(limit: logEntries))?.reversed() ?? []
        return sketches
    }

    /// `destinations[].history`: samples as rows of `[unix seconds, pending, wire bytes so far]`,
    /// oldest first (rows, not objects: 288 of them per destination on every refresh).
    package func historyJSON(destination: String) -> JSONValue {
        .object(JSONObject([
            ("intervalSeconds", .number(Double(ChartSampler.interval.components.seconds))),
            ("columns", .array(["time", "pending", "wireBytes"].map { .string($0) })),
            ("rows", .array((charts[destination] ?? []).map { sample in
                .array([.number(Double(sample.timeMs / 1000)), .number(Double(sample.pending)), .number(Double(sample.wireBytes))])
            })),
        ]))
    }

    /// `devices[].lastPosition`: the newest fix (speed in m/s, course in degrees), or null.
    package func lastPositionJSON(device: String) -> JSONValue {
        guard let fix = fixes[device] else { return .null }
        return .object(JSONObject([
            ("time", .string(Timestamp.iso8601(milliseconds: fix.timeMs))),
            ("lat", .number(Self.rounded(fix.lat))),
            ("lon", .number(Self.rounded(fix.lon))),
            ("speed", fix.speed.map { .number(($0 * 100).rounded() / 100) } ?? .null),
            ("course", fix.course.map { .number(($0 * 10).rounded() / 10) } ?? .null),
        ]))
    }

    /// `devices[].track`: rows of `[unix seconds, lat, lon]`, oldest first, ending at the newest fix.
    package func trackJSON(device: String) -> JSONValue {
        .object(JSONObject([
            ("hours", .number(Double(Self.trackHours))),
            ("columns", .array(["time", "lat", "lon"].map { .string($0) })),
            ("rows", .array((tracks[device] ?? []).map { fix in
                .array([.number(Double(fix.timeMs / 1000)), .number(Self.rounded(fix.lat)), .number(Self.rounded(fix.lon))])
            })),
        ]))
    }

    /// The top-level `log`: the newest diagnostic entries, newest first.
    package var logJSON: JSONValue {
        .array(log.map { entry in
            .object(JSONObject([("time", .string(Timestamp.iso8601(milliseconds: entry.timeMs))), ("level", .string(entry.level.name)),
                                ("message", .string(entry.message))]))
        })
    }

    /// Six decimals: about 0.1 m, finer than any GPS fix, and a third of the digits.
    private static func rounded(_ degrees: Double) -> Double { (degrees * 1e6).rounded() / 1e6 }
}

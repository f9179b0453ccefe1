import GeoRelayCore
import GeoRelaySpool
import Synchronization

/// Where a status report's sketches come from: none for the screen (it draws none), read now
/// for `georelay status --json`, or through the page's `TrackCache`.
package enum SketchSource: Sendable {
    case none
    case fresh
    case cached(TrackCache)
}

/// The page's tracks, each read again at most once a `lifetime` (a minute).
///
/// A track is up to `maxTrackPoints` index seeks per device, a few tens of milliseconds for a
/// handful of devices on a spool of millions (`georelay-bench --only status`): fine for one
/// `status --json`, too much for a page polling every 3 s on a Raspberry Pi. The newest fix
/// is read at every refresh, so the page's last position never lags; only the line behind it does.
package final class TrackCache: Sendable {
    private struct Entry {
        var readAtMs: Int64
        var points: [SpoolReader.Fix]
    }

    private let entries = Mutex<[String: Entry]>([:])
    package let lifetimeMs: Int64

    package init(lifetimeMs: Int64 = 60_000) {
        self.lifetimeMs = lifetimeMs
    }

    /// The cached track of `device`, or `read`'s when there is none younger than the lifetime.
    func track(device: String, nowMs: Int64, read: () -> [SpoolReader.Fix]) -> [SpoolReader.Fix] {
        if let entry = entries.withLock({ $0[device] }), nowMs - entry.readAtMs < lifetimeMs, nowMs >= entry.readAtMs {
            return entry.points
        }
        let points = read()
        entries.withLock { $0[device] = Entry(readAtMs: nowMs, points: points) }
        return points
    }
}

/// What the status page draws beyond `status`'s figures, read with the same report so that
/// `georelay status --json` and the page's `/status.json` stay one object: each destination's
/// 24-hour chart, each device's newest fix and recent track, and the newest diagnostic log
/// entries. Keys and shapes are documented in docs/operating.md (Status page).
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

    package static func read(
        reader: SpoolReader, devices: [String], source: SketchSource, nowMs: Int64
    ) -> StatusSketches {
        var sketches = StatusSketches()
        let cache: TrackCache?
        switch source {
        case .none: return sketches
        case .fresh: cache = nil
        case .cached(let tracks): cache = tracks
        }
        sketches.charts = (try? reader.chartSamples()) ?? [:]
        for device in devices {
            guard let fix = try? reader.newestFix(device: device) else { continue }
            sketches.fixes[device] = fix
            let since = fix.timeMs.saturatingMinus(Int64(trackHours) * 3600 * 1000)
            let read = {
                (try? reader.track(device: device, sinceMs: since, untilMs: fix.timeMs, maxPoints: maxTrackPoints))
                    ?? []
            }
            sketches.tracks[device] = cache.map { $0.track(device: device, nowMs: nowMs, read: read) } ?? read()
        }
        sketches.log = (try? reader.logEntries(limit: logEntries))?.reversed() ?? []
        return sketches
    }

    /// `destinations[].history`: samples as rows of `[unix seconds, pending, wire bytes so far]`,
    /// oldest first (rows, not objects: 288 of them per destination on every refresh).
    package func historyJSON(destination: String) -> JSONValue {
        .object(
            JSONObject([
                ("intervalSeconds", .number(Double(ChartSampler.interval.components.seconds))),
                ("columns", .array(["time", "pending", "wireBytes"].map { .string($0) })),
                (
                    "rows",
                    .array(
                        (charts[destination] ?? []).map { sample in
                            .array([
                                .number(Double(sample.timeMs / 1000)), .number(Double(sample.pending)),
                                .number(Double(sample.wireBytes)),
                            ])
                        })
                ),
            ]))
    }

    /// `devices[].lastPosition`: the newest fix (speed in m/s, course in degrees, odometer in
    /// metres along the track), or null.
    package func lastPositionJSON(device: String) -> JSONValue {
        guard let fix = fixes[device] else { return .null }
        return .object(
            JSONObject([
                ("time", .string(Timestamp.iso8601(milliseconds: fix.timeMs))),
                ("lat", .number(Self.rounded(fix.lat))),
                ("lon", .number(Self.rounded(fix.lon))),
                ("speed", fix.speed.map { .number(($0 * 100).rounded() / 100) } ?? .null),
                ("course", fix.course.map { .number(($0 * 10).rounded() / 10) } ?? .null),
                ("odometer", fix.odometer.map { .number($0.rounded()) } ?? .null),
            ]))
    }

    /// `devices[].track`: rows of `[unix seconds, lat, lon]`, oldest first, ending at the newest fix.
    package func trackJSON(device: String) -> JSONValue {
        .object(
            JSONObject([
                ("hours", .number(Double(Self.trackHours))),
                ("columns", .array(["time", "lat", "lon"].map { .string($0) })),
                (
                    "rows",
                    .array(
                        (tracks[device] ?? []).map { fix in
                            .array([
                                .number(Double(fix.timeMs / 1000)), .number(Self.rounded(fix.lat)),
                                .number(Self.rounded(fix.lon)),
                            ])
                        })
                ),
            ]))
    }

    /// The top-level `log`: the newest diagnostic entries, newest first.
    package var logJSON: JSONValue {
        .array(
            log.map { entry in
                .object(
                    JSONObject([
                        ("time", .string(Timestamp.iso8601(milliseconds: entry.timeMs))),
                        ("level", .string(entry.level.name)),
                        ("message", .string(entry.message)),
                    ]))
            })
    }

    /// Six decimals: about 0.1 m, finer than any GPS fix, and a third of the digits.
    private static func rounded(_ degrees: Double) -> Double { (degrees * 1e6).rounded() / 1e6 }
}

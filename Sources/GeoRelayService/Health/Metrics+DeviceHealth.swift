import GeoRelayCore

/// The health checks as Prometheus families: one gauge per check (0 ok, 1 degraded,
/// 2 failing) and the figures an alert wants without parsing a reason.
extension Metrics {
    static func deviceFamilies(_ device: DeviceHealth) -> String {
        var out = ""
        func family(_ name: String, _ help: String, _ samples: [Sample], type: String = "gauge") {
            out += Self.family(name, type: type, help, samples, omitEmpty: true)
        }
        func number(_ check: String, _ key: String) -> Double? {
            guard let details = device.check(check)?.details,
                case .number(let n)? = details.first(where: { $0.key == key })?.value
            else { return nil }
            return n
        }
        func rows(_ check: String, _ key: String) -> [JSONObject] {
            guard let details = device.check(check)?.details,
                case .array(let list)? = details.first(where: { $0.key == key })?.value
            else { return [] }
            return list.compactMap { if case .object(let object) = $0 { object } else { nil } }
        }
        family(
            "georelay_health", "The box's health: 0 ok, 1 degraded, 2 failing (the worst check).",
            [("", Double(device.state.rawValue))])
        family(
            "georelay_health_check", "Each health check: 0 ok, 1 degraded, 2 failing.",
            device.checks.map { (label("check", $0.key), Double($0.state.rawValue)) })
        family(
            "georelay_disk_free_bytes", "Bytes free on the spool's filesystem (for an unprivileged process).",
            number("disk", "freeBytes").map { [("", $0)] } ?? [])
        family(
            "georelay_spool_quota_needs_bytes", "How much more the spool may take before its quota (and WAL limit).",
            number("disk", "quotaNeedsBytes").map { [("", $0)] } ?? [])
        family(
            "georelay_spool_wal_bytes", "The spool's WAL beside the database.",
            number("disk", "walBytes").map { [("", $0)] } ?? [])
        if let details = device.check("clock")?.details,
            case .bool(let synced)? = details.first(where: { $0.key == "synchronised" })?.value
        {
            family(
                "georelay_clock_synchronised", "1 while the kernel says the system clock is synchronised (adjtimex).",
                [("", synced ? 1 : 0)])
        }
        family(
            "georelay_clock_newest_fix_ahead_seconds",
            "How far the receivers' newest fix is ahead of the relay's clock (negative: behind).",
            number("clock", "newestFixAheadSeconds").map { [("", $0)] } ?? [])
        let receivers = rows("sources", "receivers")
        func receiverSamples(_ key: String) -> [(labels: String, value: Double)] {
            receivers.compactMap { row in
                guard case .string(let name)? = row["name"], case .number(let n)? = row[key] else { return nil }
                return (label("device", name), n)
            }
        }
        family(
            "georelay_source_untimed_fixes_total", "Fixes refused for want of a time, per receiver.",
            receiverSamples("untimed"), type: "counter")
        family(
            "georelay_source_rollover_fixes",
            "Stored fixes dated 1024 weeks back (GPS week-number rollover), per receiver.", receiverSamples("rollover"))
        family(
            "georelay_source_last_received_age_seconds", "Time since the receiver's last stored position arrived.",
            receiverSamples("lastReceivedAgeSeconds"))
        return out
    }
}

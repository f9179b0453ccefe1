import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool

/// The uplinks as Prometheus families, only with `uplinks` configured: which uplink each
/// destination's route takes now, and what each uplink carried today and this month (UTC).
extension Metrics {
    static func uplinkFamilies(configuration: Configuration, nowMs: Int64) -> String {
        guard !configuration.uplinks.isEmpty else { return "" }
        let answers = StatusReport.uplinkAnswers(configuration)
        let usage =
            (try? SpoolReader.open(path: configuration.spool.path).uplinkUsage(day: UplinkMonitor.day(nowMs))) ?? [:]
        return family(
            "georelay_destination_uplink", "1 for the uplink a destination's route leaves by now.",
            configuration.destinations.compactMap { destination in
                guard case .uplink(let uplink)? = answers[destination.name] else { return nil }
                return (label("destination", destination.name) + "," + label("uplink", uplink.name), 1)
            })
            + family(
                "georelay_uplink_wire_bytes_today", "Wire bytes the uplink carried today (UTC), all destinations.",
                configuration.uplinks.map { (label("uplink", $0.name), Double(usage[$0.name]?.today ?? 0)) })
            + family(
                "georelay_uplink_wire_bytes_month", "Wire bytes the uplink carried this month (UTC), all destinations.",
                configuration.uplinks.map { (label("uplink", $0.name), Double(usage[$0.name]?.month ?? 0)) })
    }
}

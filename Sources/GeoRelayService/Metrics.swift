import GeoRelayCore
import GeoRelayHTTP
import GeoRelaySpool
import Glibc

/// Prometheus text exposition of what `georelay status` shows, for a monitoring
/// system on shore: `/metrics`, and `/healthz` (the device health: 200 while no check is
/// failing, 503 with the failing checks' reasons).
package enum Metrics {
    /// Serves `/metrics` and `/healthz` on `listen`, reading the spool afresh and judging
    /// every health check per request (the spool's quick_check excepted: it reads the whole file).
    /// Each request reads `live`'s configuration, so a destination or uplink a reload (SIGHUP)
    /// added or removed shows at the next scrape; the listener itself stays as it started.
    /// Each answer is of `clock`'s now (the relay's).
    package static func serve(
        listen: String, configuration live: StatusPage.LiveConfiguration, health: HealthMonitor? = nil,
        faults: FaultInjection = .none, clock: any RelayClock = SystemClock()
    ) throws(HTTPListenError) -> HTTPListener {
        try HTTPListener(listen: listen, what: "metrics.listen", clock: clock) { request in
            respond(to: request, configuration: live.configuration, health: health, faults: faults, clock: clock)
                ?? HTTPListener.Response(status: 404, reason: "Not Found")
        }
    }

    /// `/metrics` and `/healthz`; nil for any other path (the status page shares a listener this way).
    package static func respond(
        to request: HTTPListener.Request, configuration: Configuration, health: HealthMonitor?,
        faults: FaultInjection = .none, clock: any RelayClock = SystemClock()
    ) -> HTTPListener.Response? {
        switch request.path {
        case "/metrics":
            let nowMs = clock.nowMs()
            let (device, status) = DeviceHealth.assessRunning(
                configuration: configuration, monitor: health, nowMs: nowMs, faults: faults)
            guard let status else { return HTTPListener.Response(status: 503, reason: "Service Unavailable") }
            return HTTPListener.Response(
                status: 200, reason: "OK", contentType: "text/plain; version=0.0.4; charset=utf-8",
                body: Array(
                    (render(
                        status, configuration: configuration, health: health?.report(), device: device, nowMs: nowMs)
                        + uplinkFamilies(configuration: configuration, nowMs: nowMs)).utf8))
        case "/healthz":
            // Read-only, on its own connection: a stalled writer does not hold it up.
            let answer = DeviceHealth.assessRunning(
                configuration: configuration, monitor: health, nowMs: clock.nowMs(), faults: faults
            ).health.healthz
            return HTTPListener.Response(
                status: answer.status, reason: answer.status == 200 ? "OK" : "Service Unavailable",
                contentType: "text/plain", body: Array(answer.body.utf8))
        default:
            return nil
        }
    }

    /// The exposition text (format 0.0.4) as of `nowMs` (wall time); the loop families only with
    /// `health` (in the daemon), the health checks' only with `device`.
    package static func render(
        _ status: SpoolStatus, configuration: Configuration, health: HealthReport? = nil, device: DeviceHealth? = nil,
        nowMs: Int64
    ) -> String {
        var out = ""
        func family(_ name: String, _ type: String, _ help: String, _ samples: [Sample]) {
            out += Self.family(name, type: type, help, samples)
        }
        let c = status.counters
        family(
            "georelay_positions_received_total", "counter", "Positions stored, per device.",
            status.devices.map { (label("device", $0.name), Double($0.received)) })
        family(
            "georelay_device_last_fix_timestamp_seconds", "gauge", "Fix time of the newest position, per device.",
            status.devices.compactMap { d in d.lastFixMs.map { (label("device", d.name), Double($0) / 1000) } })
        let watched = status.devices.filter { d in
            configuration.devices.contains { $0.id == d.name && $0.integrity.enabled }
        }
        family(
            "georelay_integrity_state", "gauge",
            "A watched vessel's GNSS integrity: 1 for its state (ok, degraded, jammed, spoofed), 0 for the others.",
            watched.flatMap { d in
                let state = status.integrity[d.name]?.state ?? "ok"
                return IntegrityState.allCases.map { candidate in
                    (
                        label("device", d.name) + "," + label("state", candidate.rawValue),
                        candidate.rawValue == state ? 1.0 : 0
                    )
                }
            })
        family(
            "georelay_integrity_episodes_total", "counter", "Episodes of jamming or spoofing, per watched vessel.",
            watched.map { (label("device", $0.name), Double(status.integrity[$0.name]?.episodes ?? 0)) })
        if let sbd = configuration.sbd.map({ SBDUplinkStatus(settings: $0, counters: c, nowMs: nowMs) }) {
            out += Self.sbdFamilies(sbd)
        }
        family(
            "georelay_ingest_accepted_total", "counter", "Positions accepted on the socket (and phone port).",
            [("", Double(c["ingest.accepted"] ?? 0))])
        family(
            "georelay_ingest_rejected_total", "counter", "Lines refused, per reply code.",
            IngestError.allCodes.map { (label("code", $0), Double(c["ingest.rejected.\($0)"] ?? 0)) })
        let destinations = status.destinations.filter { d in configuration.destinations.contains { $0.name == d.name } }
        family(
            "georelay_destination_pending", "gauge", "Positions waiting for a destination.",
            destinations.map { (label("destination", $0.name), Double($0.pending)) })
        family(
            "georelay_destination_oldest_pending_age_seconds", "gauge",
            "Age of the oldest position waiting (0 when none).",
            destinations.map { d in
                (
                    label("destination", d.name),
                    d.oldestPendingFixMs.map { Double(max(0, nowMs.saturatingMinus($0))) / 1000 } ?? 0
                )
            })
        family(
            "georelay_destination_sent_total", "counter", "Positions a destination acknowledged.",
            destinations.map { (label("destination", $0.name), Double($0.sent)) })
        family(
            "georelay_destination_sent_behind_newer_total", "counter",
            "Positions delivered older than one of their device the server already had: Traccar raises no event for them.",
            destinations.map { (label("destination", $0.name), Double($0.behindNewer)) })
        family(
            "georelay_destination_wire_bytes_total", "counter",
            "Bytes the link carried for a destination, as a metered plan bills them (IP packets).",
            destinations.map { (label("destination", $0.name), Double($0.wireBytes)) })
        family(
            "georelay_destination_payload_bytes_total", "counter",
            "The HTTP or Teltonika frame bytes of the same requests.",
            destinations.map {
                (label("destination", $0.name), Double(status.counters["forward.payloadBytes.\($0.name)"] ?? 0))
            })
        family(
            "georelay_destination_quarantined", "gauge", "Positions a destination refused for good.",
            destinations.map { (label("destination", $0.name), Double($0.quarantined)) })
        family(
            "georelay_destination_parked", "gauge", "Positions of devices the destination does not know.",
            destinations.map { (label("destination", $0.name), Double($0.parked)) })
        family(
            "georelay_destination_up", "gauge", "1 when the destination is taking positions.",
            destinations.map { (label("destination", $0.name), $0.state == "online" ? 1 : 0) })
        family(
            "georelay_destination_last_success_timestamp_seconds", "gauge",
            "When the destination last acknowledged something.",
            destinations.compactMap { d in d.lastSuccessMs.map { (label("destination", d.name), Double($0) / 1000) } })
        family("georelay_spool_bytes", "gauge", "Bytes of the spool database in use.", [("", Double(status.usedBytes))])
        family("georelay_spool_max_bytes", "gauge", "The spool's quota.", [("", Double(configuration.spool.maxBytes))])
        family("georelay_spool_rows", "gauge", "Positions in the spool.", [("", Double(status.rows))])
        family(
            "georelay_spool_dropped_total", "counter", "Undelivered positions dropped at the quota.",
            [("", Double(c["spool.dropped"] ?? 0))])
        if let health {
            family(
                "georelay_loop_up", "gauge", "1 while the loop (ingest, writer) turns over within the stall limit.",
                health.parts.map { (label("loop", $0.key), health.isAlive($0) ? 1 : 0) })
            family(
                "georelay_loop_last_turn_age_seconds", "gauge", "Time since the loop last turned over.",
                health.parts.map { (label("loop", $0.key), Double(health.ageMs($0)) / 1000) })
        }
        if let device { out += deviceFamilies(device) }
        return out
    }

    typealias Sample = (labels: String, value: Double)

    /// One family in the exposition format: HELP, TYPE, then its samples; with `omitEmpty`,
    /// nothing at all when it has no samples (a health figure nobody could measure).
    static func family(
        _ name: String, type: String = "gauge", _ help: String, _ samples: [Sample], omitEmpty: Bool = false
    ) -> String {
        guard !omitEmpty || !samples.isEmpty else { return "" }
        var out = "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        for sample in samples {
            out +=
                name + (sample.labels.isEmpty ? "" : "{\(sample.labels)}") + " "
                + JSONValue.format(number: sample.value) + "\n"
        }
        return out
    }

    /// `key="value"`, the value escaped as the format wants (names come from the configuration,
    /// whose parser allows any text).
    static func label(_ key: String, _ value: String) -> String {
        "\(key)=\""
            + value.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"")
            .replacing("\n", with: "\\n") + "\""
    }

    /// The SBD modem aboard: its sky, what it spent against the caps, and its sessions.
    static func sbdFamilies(_ sbd: SBDUplinkStatus) -> String {
        let device = label("device", sbd.device)
        var out = ""
        func family(_ name: String, _ type: String, _ help: String, _ value: Double?) {
            out += Self.family(name, type: type, help, value.map { [(device, $0)] } ?? [])
        }
        family(
            "georelay_sbd_signal_bars", "gauge", "The modem's signal, 0-5 bars, as it last said.",
            sbd.signal.map(Double.init))
        family(
            "georelay_sbd_service", "gauge", "1 while the modem reports Iridium network service.",
            sbd.service.map { $0 ? 1 : 0 })
        family("georelay_sbd_messages_total", "counter", "Messages the modem sent.", Double(sbd.messages))
        family("georelay_sbd_failed_sessions_total", "counter", "Sessions that did not send.", Double(sbd.failures))
        family("georelay_sbd_credits_today", "gauge", "Credits spent this UTC day.", Double(sbd.creditsToday))
        family(
            "georelay_sbd_credits_daily_cap", "gauge", "Credits a UTC day may spend, alarms aside.",
            Double(sbd.dailyCap))
        family(
            "georelay_sbd_credits_month", "gauge", "Credits spent this calendar month.", Double(sbd.creditsThisMonth))
        family(
            "georelay_sbd_credits_monthly_cap", "gauge", "Credits a month may spend, alarms aside.",
            Double(sbd.monthlyCap))
        family(
            "georelay_sbd_last_session_timestamp_seconds", "gauge", "When the last session ended.",
            sbd.lastSession.map { Double($0.ms) / 1000 })
        family(
            "georelay_sbd_alarms_waiting", "gauge", "Alarms neither IP nor the modem has carried yet.",
            Double(sbd.alarmsWaiting))
        return out
    }
}

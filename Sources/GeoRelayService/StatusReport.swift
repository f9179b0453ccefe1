import GeoRelayCore
import GeoRelayForward
import GeoRelayIngest
import GeoRelaySpool
import Glibc

/// `georelay status`: what the spool says, joined with the configuration.
///
/// Read from the spool alone (read-only), so it works while the daemon is down.
/// The JSON form is one stable object; its keys are documented in docs/operating.md.
package struct StatusReport: Sendable {
    package var status: SpoolStatus
    package var configuration: Configuration
    package var running: Bool
    package var nowMs: Int64
    /// The running relay's loops, from the health file it refreshes (`HealthFile`).
    package var health: Health = .unknown("the relay is not running")
    /// Every health check (loops, spool, disk, clock, sources, links): `status --health`,
    /// the screen's `checks` and the JSON's `deviceHealth`.
    package var device = DeviceHealth(checks: [])
    /// The status page's charts, tracks and log (`StatusPage/`), in the JSON only.
    package var sketches = StatusSketches()
    /// Per destination, the uplink its traffic takes now (only with `uplinks` configured).
    package var uplinks: [String: UplinkRoute.Answer] = [:]
    /// Per uplink, the wire bytes it carried today and this month (UTC), as the relay counted them.
    package var uplinkUsage: [String: (today: Int64, month: Int64)] = [:]

    /// What `status` can say about the loops' health.
    package enum Health: Sendable, Equatable {
        /// Judged against status's own monotonic clock.
        case known(HealthReport)
        /// Why it cannot say: the relay is down, or publishes nothing fresh.
        case unknown(String)
    }

    /// - Parameter clock: whose now the report is of: the relay's when it serves the page, the
    ///   system's for `georelay status`.
    /// - Parameter monitor: the running relay's own monitor (the status page, served in-process):
    ///   the loops judged by it, not by the health file another process reads.
    /// - Parameter sketches: the page's charts, tracks and log, in the JSON only: `.fresh` for
    ///   `status --json`, the page's cache for `/status.json`, none for the screen.
    package static func load(
        configuration: Configuration, clock: any RelayClock = SystemClock(), monitor: HealthMonitor? = nil,
        sketches: SketchSource = .none, faults: FaultInjection = .none
    ) throws -> StatusReport {
        let nowMs = clock.nowMs()
        let reader = try SpoolReader.open(path: configuration.spool.path)
        let running = monitor != nil || IngestServer.isRunning(socketPath: configuration.ingest.socket)
        let status = try reader.status(nowMs: nowMs)
        let loops: Health =
            monitor.map { .known($0.report()) }
            ?? (running
                ? health(
                    from: HealthFile(socketPath: configuration.ingest.socket),
                    nowMs: clock.monotonicMs())
                : .unknown("the relay is not running"))
        let devices = status.devices.map(\.name).filter { !configuration.sourceIDs.contains($0) }
        return StatusReport(
            status: status, configuration: configuration, running: running, nowMs: nowMs, health: loops,
            device: DeviceHealth.assess(
                configuration: configuration, reader: reader, readError: nil, status: status, running: running,
                loops: loops, clockSync: faults.clockSync ?? .read(), nowMs: nowMs),
            sketches: StatusSketches.read(reader: reader, devices: devices, source: sketches, nowMs: nowMs),
            uplinks: uplinkAnswers(configuration),
            uplinkUsage: configuration.uplinks.isEmpty ? [:] : try reader.uplinkUsage(day: UplinkMonitor.day(nowMs)))
    }

    /// The running relay's health as its file tells it, judged at `nowMs` (monotonic: the
    /// machine's, which the relay's loops beat on).
    static func health(from file: HealthFile, nowMs: Int64) -> Health {
        guard let contents = file.read() else {
            return .unknown("the relay publishes no health (no readable \(file.path))")
        }
        let report = contents.report
        // The monitor rewrites the file every check; one older than the stall limit (or from
        // before a reboot, when the monotonic clock restarted) says nothing about now.
        let age = nowMs.saturatingMinus(report.atMs)
        guard age >= 0 else { return .unknown("the relay's health report is from before a reboot") }
        guard age <= report.stallAfterMs else {
            return .unknown("the relay's health report is \(HealthReport.seconds(age)) old: its monitor is not running")
        }
        return .known(report.judged(atMs: nowMs))
    }

    private func iso(_ ms: Int64?) -> JSONValue { ms.map { .string(Timestamp.iso8601(milliseconds: $0)) } ?? .null }
    private func num(_ n: Int64) -> JSONValue { .number(Double(n)) }
    private func num(_ n: Int) -> JSONValue { .number(Double(n)) }

    private var destinationRows: [(settings: Configuration.DestinationSettings?, status: SpoolStatus.Destination)] {
        configuration.destinations.map { settings in
            (
                settings,
                status.destinations.first { $0.name == settings.name }
                    ?? .notStarted(name: settings.name, buffered: settings.buffer)
            )
        }
    }

    package var json: JSONValue {
        let c = status.counters
        let rejected = JSONObject(IngestError.allCodes.map { ($0, num(c["ingest.rejected.\($0)"] ?? 0)) })
        let sbd: [(String, JSONValue)] =
            sbdCounters.map { counts in [("sbd", .object(JSONObject(counts.map { ($0.0, num($0.1)) })))] } ?? []
        let destinations: [JSONValue] = destinationRows.map { row in
            let d = row.status
            // Typed and appended in steps: Swift 6.0 gives up type-checking it as one expression.
            var members: [(key: String, value: JSONValue)] = [
                ("name", .string(d.name)),
                ("type", .string(row.settings?.kind.rawValue ?? "traccar")),
                ("url", .string(Redaction.url(row.settings?.url ?? ""))),
                ("buffered", .bool(d.buffered)),
                ("state", .string(running || d.state == "not started" ? d.state : "stopped")),
                ("pending", num(d.pending)),
                (
                    "oldestPendingAgeSeconds",
                    d.oldestPendingFixMs.map { .number(Double(max(0, nowMs.saturatingMinus($0)) / 1000)) } ?? .null
                ),
                ("lastSuccess", iso(d.lastSuccessMs)),
                ("lastError", d.lastError.map { .string($0) } ?? .null),
                ("nextAttempt", iso(d.nextAttemptMs)),
                ("sent", num(d.sent)),
                ("sentBehindNewer", num(d.behindNewer)),
                ("wireBytes", num(d.wireBytes)),
                ("payloadBytes", num(c["forward.payloadBytes.\(d.name)"] ?? 0)),
                ("quarantined", num(d.quarantined)),
                ("parked", num(d.parked)),
                ("parkedDevices", .array(d.parkedDevices.map { .string($0) })),
                ("encoding", encoding(row.settings, d).map { .string($0) } ?? .null),
                ("replayPending", num(d.replayPending)),
                ("sendRate", d.sendRate.map { .number(($0 * 10).rounded() / 10) } ?? .null),
                ("drainEstimateSeconds", drainEstimate(d).map { .number($0) } ?? .null),
                ("wireBytesToday", num(d.wireBytesToday)),
                ("wireBytesThisMonth", num(d.wireBytesThisMonth)),
            ]
            members += uplinkJSON(destination: d.name).map { (key: $0.0, value: $0.1) }
            members.append(("history", sketches.historyJSON(destination: d.name)))
            return .object(JSONObject(members))
        }
        let devices: [JSONValue] = status.devices.filter { !configuration.sourceIDs.contains($0.name) }.map { d in
            var members: [(key: String, value: JSONValue)] = [
                ("name", .string(d.name)), ("lastFix", iso(d.lastFixMs)), ("lastReceived", iso(d.lastReceivedMs)),
                ("lastPosition", sketches.lastPositionJSON(device: d.name)),
                ("track", sketches.trackJSON(device: d.name)),
            ]
            if let integrity = integrity(of: d.name) {
                members.append(
                    (
                        "integrity",
                        .object(
                            JSONObject([
                                ("state", .string(integrity.state)),
                                ("since", integrity.sinceMs == 0 ? .null : iso(integrity.sinceMs)),
                                ("evidence", .string(integrity.evidence)), ("episodes", num(integrity.episodes)),
                            ]))
                    ))
            }
            if let sources = sources(of: d.name) {
                members.append(
                    (
                        "sources",
                        .array(
                            sources.map { source in
                                .object(
                                    JSONObject([
                                        ("name", .string(source.name)), ("lastFix", iso(source.lastFixMs)),
                                        ("active", .bool(source.active)),
                                    ]))
                            })
                    ))
            }
            return .object(JSONObject(members))
        }
        return .object(
            JSONObject(
                [
                    ("time", iso(nowMs)),
                    ("running", .bool(running)),
                    (
                        "spool",
                        .object(
                            JSONObject([
                                ("path", .string(configuration.spool.path)),
                                ("rows", num(status.rows)),
                                ("fileBytes", num(status.fileBytes)),
                                ("usedBytes", num(status.usedBytes)),
                                ("maxBytes", num(configuration.spool.maxBytes)),
                                ("whenFull", .string(configuration.spool.whenFull.rawValue)),
                                ("dropped", num(c["spool.dropped"] ?? 0)),
                            ]))
                    ),
                    (
                        "ingest",
                        .object(
                            JSONObject(
                                [
                                    ("accepted", num(c["ingest.accepted"] ?? 0)),
                                    ("duplicates", num(c["ingest.duplicates"] ?? 0)),
                                    ("conflicts", num(c["ingest.conflicts"] ?? 0)),
                                    ("rejected", .object(rejected)),
                                ] + sbd))
                    ),
                    (
                        "uplink",
                        .object(
                            JSONObject([
                                ("wireBytesToday", num(status.destinations.reduce(0) { $0 + $1.wireBytesToday })),
                                (
                                    "wireBytesThisMonth",
                                    num(status.destinations.reduce(0) { $0 + $1.wireBytesThisMonth })
                                ),
                            ]))
                    ),
                    ("health", healthJSON),
                    ("deviceHealth", device.json),
                ] + uplinksJSON + sbdUplinkJSON + [
                    ("destinations", .array(destinations)),
                    ("devices", .array(devices)),
                    ("log", sketches.logJSON),
                ]))
    }

    /// The same shape whether known or not: each part's state and age, `null` when unknown.
    private var healthJSON: JSONValue {
        switch health {
        case .known(let report):
            var members: [(key: String, value: JSONValue)] = [
                ("state", .string(report.isHealthy ? "ok" : "stalled")),
                ("reason", report.problem.map { .string($0) } ?? .null),
                ("stallAfterSeconds", .number(Double(report.stallAfterMs) / 1000)),
            ]
            for part in report.parts {
                members.append(
                    (
                        part.key,
                        .object(
                            JSONObject([
                                ("state", .string(report.isAlive(part) ? "alive" : "stalled")),
                                ("lastTurnAgeSeconds", .number(Double(report.ageMs(part)) / 1000)),
                            ]))
                    ))
            }
            return .object(JSONObject(members))
        case .unknown(let reason):
            let unknown = JSONValue.object(JSONObject([("state", .string("unknown")), ("lastTurnAgeSeconds", .null)]))
            return .object(
                JSONObject([
                    ("state", .string("unknown")), ("reason", .string(reason)), ("stallAfterSeconds", .null),
                    ("ingest", unknown), ("writer", unknown),
                ]))
        }
    }

    /// One line: each part alive or stalled, or why the health is unknown.
    private var healthText: String {
        switch health {
        case .known(let report):
            return report.parts.map { part in
                report.isAlive(part)
                    ? "\(part.name) alive (turned \(HealthReport.seconds(report.ageMs(part))) ago)"
                    : "\(part.name) STALLED (no turn for \(HealthReport.seconds(report.ageMs(part))), limit \(HealthReport.seconds(report.stallAfterMs)))"
            }.joined(separator: ", ")
        case .unknown(let reason):
            return "unknown: \(reason)"
        }
    }

    /// The body encoding a push destination uses: the configured one, or what a 415 made it fall back to.
    private func encoding(_ settings: Configuration.DestinationSettings?, _ status: SpoolStatus.Destination) -> String?
    {
        guard let push = settings?.push else { return nil }
        return status.encoding ?? push.compression.rawValue
    }

    /// Seconds until the backlog is gone at the recent send rate (0 when nothing waits).
    private func drainEstimate(_ d: SpoolStatus.Destination) -> Double? {
        if d.pending == 0 { return 0 }
        guard let rate = d.sendRate, rate > 0 else { return nil }
        return (Double(d.pending) / rate).rounded()
    }

    /// A watched vessel's integrity as the spool last recorded it; `ok` with no episode when its
    /// watch never left `ok`; nil for a device the watch does not judge.
    private func integrity(of device: String) -> IntegrityRecord? {
        guard configuration.devices.contains(where: { $0.id == device && $0.integrity.enabled }) else { return nil }
        return status.integrity[device] ?? IntegrityRecord(device: device, state: "ok", sinceMs: 0, evidence: "")
    }

    /// A multi-source device's receivers, best first, with the one feeding it as of its newest
    /// position: the best heard within the failover window before the device last received one,
    /// as the router chose then. (Judged against the device's time, not the reader's: a status read
    /// a minute after the boat's receivers fell silent still names the one that was in use.)
    private func sources(of device: String) -> [(name: String, lastFixMs: Int64?, active: Bool)]? {
        guard let configured = configuration.devices.first(where: { $0.id == device }) else { return nil }
        let rows = configured.sources.map { name in (name, status.devices.first { $0.name == name }) }
        let window = Int64(configured.failoverSeconds * 1000)
        let reference = status.devices.first { $0.name == device }?.lastReceivedMs ?? nowMs
        let active = rows.first { row in
            row.1?.lastReceivedMs.map { reference.saturatingMinus($0).magnitude <= window.magnitude } ?? false
        }?.0
        return rows.map { ($0.0, $0.1?.lastFixMs, $0.0 == active) }
    }

    /// The SBD modem aboard (`sbd`), as the spool last recorded it.
    var sbdUplink: SBDUplinkStatus? {
        configuration.sbd.map { SBDUplinkStatus(settings: $0, counters: status.counters, nowMs: nowMs) }
    }

    private var sbdUplinkJSON: [(String, JSONValue)] {
        sbdUplink.map { [("sbd", $0.json)] } ?? []
    }

    /// The shore relay's SBD door's counts, when it has one (`ingest.sbd.directIP`).
    private var sbdCounters: [(String, Int64)]? {
        guard configuration.ingest.sbd.directIP != nil else { return nil }
        let c = status.counters
        return [
            ("messages", c["ingest.sbd.messages"] ?? 0), ("refused", c["ingest.sbd.refused"] ?? 0),
            ("positions", c["ingest.sbd.positions"] ?? 0),
        ]
    }

    /// One screen for a person on a terminal.
    package var text: String {
        var out = "georelay \(running ? "running" : "not running") at \(Timestamp.iso8601(milliseconds: nowMs))\n"
        out +=
            "spool   \(configuration.spool.path): \(status.rows) positions, \(bytes(status.usedBytes)) used of \(bytes(configuration.spool.maxBytes)) (file \(bytes(status.fileBytes))), when full: \(configuration.spool.whenFull.rawValue)"
        if let dropped = status.counters["spool.dropped"], dropped > 0 { out += ", dropped \(dropped)" }
        out += "\n"
        let c = status.counters
        let rejected = IngestError.allCodes.compactMap { code in
            c["ingest.rejected.\(code)"].flatMap { $0 > 0 ? "\(code) \($0)" : nil }
        }
        out +=
            "ingest  accepted \(c["ingest.accepted"] ?? 0), duplicates \(c["ingest.duplicates"] ?? 0), conflicts \(c["ingest.conflicts"] ?? 0), rejected \(rejected.isEmpty ? "0" : rejected.joined(separator: ", "))\n"
        if let sbd = sbdCounters {
            out += "sbd     " + sbd.map { "\($0.0) \($0.1)" }.joined(separator: ", ") + " (Iridium DirectIP)\n"
        }
        if let modem = sbdUplink { out += "iridium \(modem.text)\n" }
        out += "health  \(healthText)\n"
        out += "\nchecks: \(device.state.name)\n" + device.text
        out += "\ndestinations\n"
        for row in destinationRows {
            let d = row.status
            let state = running || d.state == "not started" ? d.state : "stopped"
            let encoding = self.encoding(row.settings, d).map { ", \($0)" } ?? ""
            out +=
                "  \(d.name) (\(row.settings?.kind.rawValue ?? "traccar") \(Redaction.url(row.settings?.url ?? ""))\(encoding)): \(state)\(d.buffered ? "" : ", real-time only")\(uplinkText(destination: d.name))\n"
            var line = "    pending \(d.pending)"
            if let oldest = d.oldestPendingFixMs { line += ", oldest \(duration(nowMs.saturatingMinus(oldest))) old" }
            line +=
                ", sent \(d.sent), \(bytes(d.wireBytes)) on the wire (\(bytes(status.counters["forward.payloadBytes.\(d.name)"] ?? 0)) of it HTTP)"
            if d.behindNewer > 0 { line += " (\(d.behindNewer) behind a newer one: no Traccar events)" }
            if let rate = d.sendRate { line += ", sending \(oneDecimal(rate))/s" }
            if d.pending > 0, let eta = drainEstimate(d) {
                line += ", drained in about \(duration(CheckedNumbers.milliseconds(seconds: eta) ?? .max))"
            }
            line += ", today \(bytes(d.wireBytesToday)), this month \(bytes(d.wireBytesThisMonth))"
            if d.replayPending > 0 { line += ", replay pending \(d.replayPending)" }
            if d.quarantined > 0 { line += ", quarantined \(d.quarantined)" }
            if d.parked > 0 { line += ", parked \(d.parked) (\(d.parkedDevices.joined(separator: ", ")))" }
            out += line + "\n"
            var times =
                "    last success \(d.lastSuccessMs.map { "\(duration(nowMs.saturatingMinus($0))) ago" } ?? "never")"
            if let next = d.nextAttemptMs, d.state != "online" {
                times += ", next attempt in \(duration(max(0, next.saturatingMinus(nowMs))))"
            }
            if let error = d.lastError, d.state != "online" {
                times += d.state == "deferred" ? ", deferred: \(error)" : ", last error: \(error)"
            }
            out += times + "\n"
        }
        out += uplinksText
        if !status.devices.isEmpty {
            out += "\ndevices\n"
            for device in status.devices where !configuration.sourceIDs.contains(device.name) {
                out +=
                    "  \(device.name): last fix \(device.lastFixMs.map { Timestamp.iso8601(milliseconds: $0) } ?? "none")"
                if let received = device.lastReceivedMs {
                    out += ", received \(duration(nowMs.saturatingMinus(received))) ago"
                }
                if let sources = sources(of: device.name) {
                    out +=
                        "; sources "
                        + sources.map { "\($0.name)\($0.active ? " (active)" : "")" }.joined(separator: ", ")
                }
                if let integrity = integrity(of: device.name) { out += "; " + Self.integrityText(integrity) }
                out += "\n"
            }
        }
        return out
    }

    /// A vessel's integrity in plain words: `integrity spoofed since … (evidence); 2 episodes`.
    static func integrityText(_ record: IntegrityRecord) -> String {
        var text = "integrity \(record.state)"
        if record.state != "ok", record.sinceMs != 0 {
            text += " since \(Timestamp.iso8601(milliseconds: record.sinceMs))"
        }
        if !record.evidence.isEmpty { text += " (\(record.evidence))" }
        if record.episodes > 0 {
            text += "; \(record.episodes) episode\(record.episodes == 1 ? "" : "s") of jamming or spoofing"
        }
        return text
    }

    /// The health checks' formatting, so status and its checks read alike.
    private func bytes(_ n: Int64) -> String { HealthChecks.bytes(n) }

    /// Whole seconds and up (status has no use for milliseconds).
    private func duration(_ ms: Int64) -> String { ms < 1000 ? "0 s" : HealthChecks.duration(ms) }
}

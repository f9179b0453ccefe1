import GeoRelayCore
import Glibc

/// Where each check turns from ok to degraded to failing; docs/operating.md's health section lists
/// the same figures.
package struct HealthThresholds: Sendable, Equatable {
    /// Disk: degraded when the spool's filesystem has less than this share of its size free.
    package var diskDegradedFreeFraction = 0.10
    /// Disk: degraded when the WAL is this many times its checkpoint limit (a reader holds
    /// checkpoints back, or they fail).
    package var walDegradedFactor: Int64 = 2
    /// Clock: fixes this far ahead of the relay's clock mean the clock is behind.
    package var clockFixAheadMs: Int64 = 10 * 60_000
    /// Sources: a receiver that refused fixes for want of a time and stored none for this long is degraded.
    package var sourceQuietMs: Int64 = 10 * 60_000
    /// Links: a destination not delivering what waits for this long (since its last success) is failing.
    package var linkFailingAfterMs: Int64 = 3_600_000

    package init() {}
}

/// The judgements, each a pure function of what was measured, so the tests inject inputs
/// (free bytes, adjtimex's answer, fix ages) instead of depending on this machine.
package enum HealthChecks {
    // MARK: - The relay's loops and the spool file

    /// The ingest loop and the spool writer: failing when one is stalled or the relay is not
    /// running, degraded while the running relay publishes no fresh health.
    package static func loops(running: Bool, health: StatusReport.Health) -> HealthCheck {
        guard running else { return HealthCheck(key: "loops", state: .failing, summary: "the relay is not running") }
        switch health {
        case .known(let report):
            if let problem = report.problem { return HealthCheck(key: "loops", state: .failing, summary: problem) }
            return HealthCheck(
                key: "loops", state: .ok,
                summary: report.parts.map { "\($0.name) turned \(HealthReport.seconds(report.ageMs($0))) ago" }.joined(
                    separator: ", "))
        case .unknown(let reason):
            return HealthCheck(key: "loops", state: .degraded, summary: reason)
        }
    }

    /// The spool file: readable, and sound by `quick_check` when that ran (`problems` nil: not run).
    package static func spool(readError: String?, problems: [String]?) -> HealthCheck {
        let ran: JSONValue = problems == nil ? .null : .bool(problems?.isEmpty == true)
        let listed: JSONValue = .array((problems ?? []).map { .string($0) })
        if let readError {
            let found =
                (problems ?? []).isEmpty
                ? "" : "; quick_check found: \(problems?.prefix(3).joined(separator: "; ") ?? "")"
            return HealthCheck(
                key: "spool", state: .failing, summary: "spool unreadable: \(readError)\(found)",
                details: [("quickCheckOk", ran), ("problems", listed)])
        }
        guard let problems else {
            return HealthCheck(
                key: "spool", state: .ok, summary: "readable (quick_check not run: georelay check --spool)",
                details: [("quickCheckOk", ran), ("problems", listed)])
        }
        guard problems.isEmpty else {
            return HealthCheck(
                key: "spool", state: .failing,
                summary:
                    "quick_check found \(problems.count == 1 ? "a problem" : "\(problems.count) problems"): \(problems.prefix(3).joined(separator: "; "))",
                details: [("quickCheckOk", ran), ("problems", listed)])
        }
        return HealthCheck(
            key: "spool", state: .ok, summary: "readable, quick_check ok",
            details: [("quickCheckOk", ran), ("problems", listed)])
    }

    // MARK: - Disk

    /// Free space on the spool's filesystem against what the quota may still take.
    ///
    /// The spool grows to `maxBytes` plus a WAL of up to its checkpoint limit, so the disk
    /// must still hold that much beyond the file's current size: less is failing (the disk,
    /// not the quota, will decide when positions go). Degraded below a tenth of the
    /// filesystem free, or with a WAL past twice its limit.
    package static func disk(
        space: Result<DiskSpace, DiskSpaceError>, fileBytes: Int64, walBytes: Int64, maxBytes: Int64,
        thresholds: HealthThresholds = HealthThresholds()
    ) -> HealthCheck {
        let walLimit = walLimitBytes(maxBytes: maxBytes)
        let needed = max(0, maxBytes + walLimit - fileBytes)
        var details: [(key: String, value: JSONValue)] = [
            ("fileBytes", .number(Double(fileBytes))), ("walBytes", .number(Double(walBytes))),
            ("walLimitBytes", .number(Double(walLimit))),
            ("quotaNeedsBytes", .number(Double(needed))),
        ]
        let free: DiskSpace
        switch space {
        case .success(let measured): free = measured
        case .failure(let error):
            return HealthCheck(
                key: "disk", state: .degraded, summary: "cannot measure free space: \(error.message)",
                details: details + [("freeBytes", .null), ("totalBytes", .null)])
        }
        details += [
            ("freeBytes", .number(Double(free.availableBytes))), ("totalBytes", .number(Double(free.totalBytes))),
        ]
        let wal = "WAL \(bytes(walBytes)) of its \(bytes(walLimit)) limit"
        if free.availableBytes < needed {
            return HealthCheck(
                key: "disk", state: .failing,
                summary:
                    "\(bytes(free.availableBytes)) free, but the spool may still grow by \(bytes(needed)) (spool.maxBytes \(bytes(maxBytes)) and its WAL): the disk fills before the quota; \(wal)",
                details: details)
        }
        let fraction = free.totalBytes > 0 ? Double(free.availableBytes) / Double(free.totalBytes) : 1
        let summary =
            "\(bytes(free.availableBytes)) free (\(Int((fraction * 100).rounded())) %), the spool may still grow by \(bytes(needed)); \(wal)"
        if fraction < thresholds.diskDegradedFreeFraction {
            return HealthCheck(
                key: "disk", state: .degraded,
                summary: summary
                    + "; less than \(Int(thresholds.diskDegradedFreeFraction * 100)) % of the filesystem free",
                details: details)
        }
        if walBytes > thresholds.walDegradedFactor * walLimit {
            return HealthCheck(
                key: "disk", state: .degraded,
                summary: summary + ": the WAL is not being checkpointed (a reader holding it?)", details: details)
        }
        return HealthCheck(key: "disk", state: .ok, summary: summary, details: details)
    }

    /// The WAL limit the writer sets (`journal_size_limit` in `SpoolConnection.openWriter`):
    /// an eighth of the quota, between 256 KiB and 16 MiB.
    package static func walLimitBytes(maxBytes: Int64) -> Int64 {
        min(16 << 20, max(256 << 10, maxBytes / 8))
    }

    // MARK: - Clock

    /// The system clock: synchronised or not (adjtimex), and whether the receivers' newest fix
    /// agrees with it.
    ///
    /// Unsynchronised alone is not a fault: an offline relay often has no NTP, and the GPS fixes
    /// are its time reference. It is failing when the clock was never set (before 2025), or when
    /// it is unsynchronised and the newest fix is more than `clockFixAheadMs` ahead of it (the
    /// clock is behind: ingest refuses fixes more than `ingest.maxFutureSeconds` ahead as `time`).
    /// A synchronised clock that fixes run ahead of is degraded (the receiver or the time source
    /// is wrong). A fix behind the clock proves nothing (a collector's backlog), so it is only shown.
    /// A step of the clock while the relay runs is shown, not judged.
    package static func clock(
        sync: ClockSync, nowMs: Int64, newestFixMs: Int64?, jump: ClockJump?,
        thresholds: HealthThresholds = HealthThresholds()
    ) -> HealthCheck {
        var details: [(key: String, value: JSONValue)] = []
        let syncText: String
        switch sync {
        case .synchronised(let maxErrorMs):
            syncText = "synchronised (max error \(milliseconds(maxErrorMs)))"
            details += [("synchronised", .bool(true)), ("maxErrorSeconds", .number(Double(maxErrorMs) / 1000))]
        case .unsynchronised(let maxErrorMs):
            syncText = "not synchronised (adjtimex: STA_UNSYNC)"
            details += [("synchronised", .bool(false)), ("maxErrorSeconds", .number(Double(maxErrorMs) / 1000))]
        case .unknown(let why):
            syncText = "synchronisation unknown (\(why))"
            details += [("synchronised", .null), ("maxErrorSeconds", .null)]
        }
        let offset = newestFixMs.map { $0.saturatingMinus(nowMs) }
        details.append(("newestFixAheadSeconds", offset.map { .number(Double($0 / 100) / 10) } ?? .null))
        details.append(
            (
                "lastJump",
                jump.map {
                    .object(
                        JSONObject([
                            ("bySeconds", .number(Double($0.byMs / 100) / 10)),
                            ("at", .string(Timestamp.iso8601(milliseconds: $0.atMs))),
                        ]))
                } ?? .null
            ))
        var parts = [syncText]
        if let offset {
            parts.append(
                offset >= 0
                    ? "newest fix \(duration(offset)) ahead of it"
                    : "newest fix \(duration(Int64(clamping: offset.magnitude))) behind it")
        } else {
            parts.append("no fix to compare with")
        }
        if let jump {
            parts.append(
                "jumped by \(jump.byMs >= 0 ? "+" : "-")\(duration(Int64(clamping: jump.byMs.magnitude))) at \(Timestamp.iso8601(milliseconds: jump.atMs))"
            )
        }
        let summary = parts.joined(separator: ", ")
        if nowMs < WallClock.plausibleMs {
            return HealthCheck(
                key: "clock", state: .failing,
                summary: "the clock reads \(Timestamp.iso8601(milliseconds: nowMs)), before 2025: it was never set; "
                    + summary, details: details)
        }
        if let offset, offset > thresholds.clockFixAheadMs {
            if case .synchronised = sync {
                return HealthCheck(
                    key: "clock", state: .degraded, summary: summary + ": a receiver or the time source is wrong",
                    details: details)
            }
            return HealthCheck(
                key: "clock", state: .failing,
                summary: summary
                    + ": the clock is behind (fixes ahead of it by more than ingest.maxFutureSeconds are refused)",
                details: details)
        }
        return HealthCheck(key: "clock", state: .ok, summary: summary, details: details)
    }

    // MARK: - Formatting

    static func bytes(_ n: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(n)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(n) B" : "\(oneDecimal(value)) \(units[unit])"
    }

    /// "850 ms", "2 s", "12 min", "3 h", "140 d".
    static func duration(_ ms: Int64) -> String {
        if ms < 1000 { return "\(max(0, ms)) ms" }
        let s = ms / 1000
        if s < 120 { return "\(s) s" }
        if s < 7200 { return "\(s / 60) min" }
        if s < 172_800 { return "\(s / 3600) h" }
        return "\(s / 86400) d"
    }

    static func milliseconds(_ ms: Int64) -> String { ms < 10_000 ? "\(ms) ms" : duration(ms) }
}

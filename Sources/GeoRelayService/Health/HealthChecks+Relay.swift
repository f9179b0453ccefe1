import GeoRelayCore
import GeoRelaySpool

/// The checks over what the spool records: the receivers feeding the relay and the
/// destinations it feeds.
extension HealthChecks {
    /// Each receiver's last line and last fix, and the receivers whose fixes come without a
    /// time or dated 1024 weeks back (GPS week-number rollover), counted and named.
    ///
    /// Degraded while a receiver's newest stored fix is a rolled-over one (its positions reach
    /// the servers 19.6 years in the past), or while one refuses fixes for want of a time and
    /// has stored none for `sourceQuietMs` (it has a position but no time). Counts of the past
    /// are named without changing the state. A quiet receiver is shown, not judged: a phone
    /// off duty is quiet too.
    package static func sources(
        _ receivers: [ReceiverRecord], nowMs: Int64, thresholds: HealthThresholds = HealthThresholds()
    ) -> HealthCheck {
        func age(_ ms: Int64?) -> JSONValue {
            ms.map { .number(Double(max(0, nowMs.saturatingMinus($0)) / 100) / 10) } ?? .null
        }
        var problems: [String] = []
        var notes: [String] = []
        var rows: [JSONValue] = []
        for receiver in receivers {
            let rolledOverNow =
                receiver.newestFixMs.flatMap { fix in
                    receiver.newestReceivedMs.map { WeekRollover.isRolledOver(fixMs: fix, receivedMs: $0) }
                } ?? false
            let quietFor = receiver.lastReceivedMs.map { nowMs.saturatingMinus($0) }
            let untimedNow = receiver.untimedFixes > 0 && (quietFor.map { $0 > thresholds.sourceQuietMs } ?? true)
            rows.append(
                .object(
                    JSONObject([
                        ("name", .string(receiver.name)),
                        ("lastReceivedAgeSeconds", age(receiver.lastReceivedMs)),
                        ("lastFixAgeSeconds", age(receiver.newestFixMs ?? receiver.lastFixMs)),
                        ("untimed", .number(Double(receiver.untimedFixes))),
                        ("rollover", .number(Double(receiver.rolloverFixes))),
                        ("rolledOverNow", .bool(rolledOverNow)),
                    ])))
            if rolledOverNow {
                problems.append(
                    "\(receiver.name) dates its fixes 1024 weeks back (GPS week-number rollover; newest \(Timestamp.iso8601(milliseconds: receiver.newestFixMs ?? 0)), \(fixes(receiver.rolloverFixes)) so far)"
                )
            } else if receiver.rolloverFixes > 0 {
                notes.append("\(receiver.name): \(fixes(receiver.rolloverFixes)) dated 1024 weeks back, none lately")
            }
            if untimedNow {
                let since = quietFor.map { "none with one for \(duration($0))" } ?? "never one with a time"
                problems.append("\(receiver.name) sent \(fixes(receiver.untimedFixes)) without a time, \(since)")
            } else if receiver.untimedFixes > 0 {
                notes.append("\(receiver.name): \(fixes(receiver.untimedFixes)) without a time, timed ones since")
            }
        }
        let details: [(key: String, value: JSONValue)] = [("receivers", .array(rows))]
        if !problems.isEmpty {
            return HealthCheck(
                key: "sources", state: .degraded, summary: (problems + notes).joined(separator: "; "), details: details)
        }
        let heard = receivers.compactMap(\.lastReceivedMs).max()
        guard let heard else {
            return HealthCheck(
                key: "sources", state: .ok,
                summary: (["no receiver has sent a position yet"] + notes).joined(separator: "; "), details: details)
        }
        let newest = receivers.compactMap { $0.newestFixMs ?? $0.lastFixMs }.max()
        var summary =
            "\(receivers.count) receiver\(receivers.count == 1 ? "" : "s"), last line \(duration(nowMs.saturatingMinus(heard))) ago"
        if let newest { summary += ", newest fix \(duration(nowMs.saturatingMinus(newest))) old" }
        return HealthCheck(
            key: "sources", state: .ok, summary: ([summary] + notes).joined(separator: "; "), details: details)
    }

    static func fixes(_ n: Int64) -> String { n == 1 ? "1 fix" : "\(n) fixes" }

    /// Per destination its state, last success and why it is not delivering.
    ///
    /// Online (or not started, or with nothing waiting) is ok. Not online with positions
    /// waiting is degraded, and failing once its last success (or, never having had one, the
    /// arrival of the oldest position waiting, `waitingSinceMs`) is older than `linkFailingAfterMs`; refused credentials
    /// (`auth-failed`) are failing at once: waiting will not fix them. A backlog `deferred` by a
    /// spent uplink budget is degraded however long it lasts: that is the budget working. With the relay down
    /// nothing is judged here (the loops check says it is down).
    package static func links(
        _ destinations: [SpoolStatus.Destination], waitingSinceMs: [String: Int64] = [:], running: Bool, nowMs: Int64,
        thresholds: HealthThresholds = HealthThresholds()
    ) -> HealthCheck {
        var worst = HealthState.ok
        var problems: [String] = []
        var rows: [JSONValue] = []
        for d in destinations {
            var state = HealthState.ok
            var reason: String?
            let waiting = d.pending + d.replayPending
            if running, d.state != "online", d.state != "not started" {
                // Never delivered: the oldest waiting position's arrival says how long (not its fix
                // time, which a backlog or a week rollover puts far back).
                let since = d.lastSuccessMs ?? waitingSinceMs[d.name] ?? nowMs
                let success =
                    d.lastSuccessMs.map { "last success \(duration(nowMs.saturatingMinus($0))) ago" }
                    ?? "never delivered"
                let error = d.lastError.map { ", last error: \($0)" } ?? ""
                if d.state == "auth-failed" {
                    state = .failing
                    reason = "\(d.name): credentials refused (auth-failed), \(waiting) waiting, \(success)\(error)"
                } else if d.state == "deferred" {
                    // A budget doing its job: the crew should see it, but it is no failure of the link.
                    state = .degraded
                    reason = "\(d.name): \(waiting) waiting, deferred: \(d.lastError ?? "an uplink budget is spent")"
                } else if waiting > 0 {
                    state = nowMs.saturatingMinus(since) > thresholds.linkFailingAfterMs ? .failing : .degraded
                    reason = "\(d.name): \(d.state), \(waiting) waiting, \(success)\(error)"
                }
            }
            worst = max(worst, state)
            if let reason { problems.append(reason) }
            rows.append(
                .object(
                    JSONObject([
                        ("name", .string(d.name)),
                        ("state", .string(running || d.state == "not started" ? d.state : "stopped")),
                        ("health", .string(state.name)),
                        ("lastSuccess", d.lastSuccessMs.map { .string(Timestamp.iso8601(milliseconds: $0)) } ?? .null),
                        ("reason", reason.map { .string($0) } ?? .null),
                    ])))
        }
        let details: [(key: String, value: JSONValue)] = [("destinations", .array(rows))]
        if !problems.isEmpty {
            return HealthCheck(key: "links", state: worst, summary: problems.joined(separator: "; "), details: details)
        }
        guard running else {
            return HealthCheck(
                key: "links", state: .ok, summary: "not judged: the relay is not running", details: details)
        }
        let online = destinations.filter { $0.state == "online" }.count
        return HealthCheck(
            key: "links", state: .ok,
            summary: destinations.isEmpty
                ? "no destinations" : "\(online) of \(destinations.count) online, nothing held up", details: details)
    }
}

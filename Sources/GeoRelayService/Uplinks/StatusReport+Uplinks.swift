import GeoRelayCore
import GeoRelayForward

/// Which uplink each destination's traffic takes, in status: asked of the kernel at each report
/// (`UplinkRoute`, nothing sent), and what each uplink carried today and this month, as the
/// running relay counted it (`UplinkMonitor`). Only when `uplinks` are configured; without them
/// the report is as it was, no key added.
extension StatusReport {
    /// - Parameter addresses: the running relay's resolved addresses (`UplinkMonitor`); nil resolves afresh.
    static func uplinkAnswers(_ configuration: Configuration, addresses: AddressCache? = nil) -> [String: UplinkRoute
        .Answer]
    {
        guard !configuration.uplinks.isEmpty else { return [:] }
        var answers: [String: UplinkRoute.Answer] = [:]
        for destination in configuration.destinations {
            answers[destination.name] = UplinkRoute.answer(
                for: destination.url, uplinks: configuration.uplinks, addresses: addresses)
        }
        return answers
    }

    /// `destinations[].uplink`: `{ "name", "interface", "metered" }`; `name` null when the route
    /// leaves by an interface no uplink names; `{ "unknown": reason }` when there is no route.
    func uplinkJSON(destination: String) -> [(String, JSONValue)] {
        guard let answer = uplinks[destination] else { return [] }
        switch answer {
        case .uplink(let uplink):
            return [
                (
                    "uplink",
                    .object(
                        JSONObject([
                            ("name", .string(uplink.name)), ("interface", .string(uplink.interface)),
                            ("metered", .bool(uplink.metered)),
                        ]))
                )
            ]
        case .otherInterface(let interface):
            return [
                (
                    "uplink",
                    .object(JSONObject([("name", .null), ("interface", .string(interface)), ("metered", .null)]))
                )
            ]
        case .unknown(let reason):
            return [("uplink", .object(JSONObject([("unknown", .string(reason))])))]
        }
    }

    /// `, via starlink (eth1)` on the destination's line of the screen.
    func uplinkText(destination: String) -> String {
        uplinks[destination].map { ", \($0.phrase)" } ?? ""
    }
}

extension StatusReport {
    /// Positions waiting for destinations on `uplink` whose backlog its spent budget defers.
    func deferred(by uplink: String) -> Int {
        status.destinations.filter { d in
            guard d.state == "deferred", case .uplink(let used)? = uplinks[d.name] else { return false }
            return used.name == uplink
        }.reduce(0) { $0 + $1.pending }
    }

    /// `uplinks`: `[{ "name", "interface", "metered", "wireBytesToday", "wireBytesThisMonth",
    /// "budget", "deferred" }]`, in the configuration's order; absent without `uplinks`.
    var uplinksJSON: [(String, JSONValue)] {
        guard !configuration.uplinks.isEmpty else { return [] }
        return [
            (
                "uplinks",
                .array(
                    configuration.uplinks.map { uplink in
                        let usage = uplinkUsage[uplink.name] ?? (0, 0)
                        return .object(
                            JSONObject([
                                ("name", .string(uplink.name)),
                                ("interface", .string(uplink.interface)),
                                ("metered", .bool(uplink.metered)),
                                ("wireBytesToday", .number(Double(usage.today))),
                                ("wireBytesThisMonth", .number(Double(usage.month))),
                                (
                                    "budget",
                                    uplink.budget.map { budget in
                                        .object(
                                            JSONObject([
                                                ("dayBytes", budget.dayBytes.map { .number(Double($0)) } ?? .null),
                                                ("monthBytes", budget.monthBytes.map { .number(Double($0)) } ?? .null),
                                                (
                                                    "dayLeft",
                                                    budget.dayBytes.map { .number(Double(max(0, $0 - usage.today))) }
                                                        ?? .null
                                                ),
                                                (
                                                    "monthLeft",
                                                    budget.monthBytes.map { .number(Double(max(0, $0 - usage.month))) }
                                                        ?? .null
                                                ),
                                                (
                                                    "spent",
                                                    .bool(budget.isSpent(today: usage.today, month: usage.month))
                                                ),
                                            ]))
                                    } ?? .null
                                ),
                                ("deferred", .number(Double(deferred(by: uplink.name)))),
                            ]))
                    })
            )
        ]
    }

    /// The screen's `uplinks` section: one line per uplink.
    var uplinksText: String {
        guard !configuration.uplinks.isEmpty else { return "" }
        var out = "\nuplinks\n"
        for uplink in configuration.uplinks {
            let usage = uplinkUsage[uplink.name] ?? (0, 0)
            let carrying = configuration.destinations.map(\.name).filter {
                if case .uplink(let used)? = uplinks[$0] { return used.name == uplink.name }
                return false
            }
            out +=
                "  \(uplink.name) (\(uplink.interface)\(uplink.metered ? ", metered" : "")): today \(HealthChecks.bytes(usage.today))"
            if let day = uplink.budget?.dayBytes { out += " of \(HealthChecks.bytes(day))" }
            out += ", this month \(HealthChecks.bytes(usage.month))"
            if let month = uplink.budget?.monthBytes { out += " of \(HealthChecks.bytes(month))" }
            if uplink.budget?.isSpent(today: usage.today, month: usage.month) == true {
                out += ", BUDGET SPENT"
                let held = deferred(by: uplink.name)
                if held > 0 { out += " (\(held) positions deferred)" }
            }
            out +=
                carrying.isEmpty
                ? ", carrying no destination now\n" : ", carrying \(carrying.joined(separator: ", "))\n"
        }
        return out
    }
}

import GeoRelayCore

/// How one check, or the whole box, is doing. Ordered: the box is as bad as its worst check.
package enum HealthState: Int, Sendable, Comparable, CaseIterable {
    /// Nothing to do.
    case ok = 0
    /// Working, but someone should look: positions wait, or will soon be lost, if it goes on.
    case degraded = 1
    /// Positions are being lost or not relayed, or will be as things stand.
    case failing = 2

    package static func < (a: HealthState, b: HealthState) -> Bool { a.rawValue < b.rawValue }

    /// `ok`, `degraded`, `failing`: JSON values and metric documentation.
    package var name: String {
        switch self {
        case .ok: "ok"
        case .degraded: "degraded"
        case .failing: "failing"
        }
    }
}

/// One check's verdict: its state and a plain-language reason a person can act on.
package struct HealthCheck: Sendable {
    /// `loops`, `disk`, `integrity`, `clock`, `sources`, `links`: JSON keys and metric labels.
    package var key: String
    package var state: HealthState
    /// What was found, also when ok ("79.0 GiB free, the quota needs at most 1.1 GiB more").
    package var summary: String
    /// The figures behind the verdict, for `status --json` (keys documented in docs/operating.md).
    package var details: [(key: String, value: JSONValue)]

    package init(key: String, state: HealthState, summary: String, details: [(key: String, value: JSONValue)] = []) {
        self.key = key
        self.state = state
        self.summary = summary
        self.details = details
    }
}

/// Whether the box is healthy, in one place: the checks `georelay status` (screen, JSON,
/// `--health`), `/healthz` and `/metrics` all show, judged by the same functions
/// (`HealthChecks`) over inputs gathered in `DeviceHealth.assess`.
package struct DeviceHealth: Sendable {
    package var checks: [HealthCheck]

    package init(checks: [HealthCheck]) {
        self.checks = checks
    }

    /// The worst check's state (ok with no checks).
    package var state: HealthState { checks.map(\.state).max() ?? .ok }

    package func check(_ key: String) -> HealthCheck? { checks.first { $0.key == key } }

    /// "links: traccar in backoff for 12 min ...", one per check that is not ok, worst first.
    package var reasons: [String] {
        checks.filter { $0.state != .ok }.sorted { $0.state > $1.state }.map { "\($0.key): \($0.summary)" }
    }

    /// `status --health`'s exit status: 0 healthy, 1 degraded, 2 failing.
    package var exitCode: ExitCode {
        switch state {
        case .ok: .success
        case .degraded: .failure
        case .failing: .unhealthy
        }
    }

    package var json: JSONValue {
        .object(
            JSONObject([
                ("state", .string(state.name)),
                ("reasons", .array(reasons.map { .string($0) })),
                (
                    "checks",
                    .object(
                        JSONObject(
                            checks.map { check in
                                (
                                    check.key,
                                    .object(
                                        JSONObject(
                                            [("state", .string(check.state.name)), ("summary", .string(check.summary))]
                                                + check.details))
                                )
                            }))
                ),
            ]))
    }

    /// One line per check: `  disk       ok        79.0 GiB free, ...`.
    package var text: String {
        let width = max(8, (checks.map(\.key.count).max() ?? 0) + 2)
        return checks.map { check in
            let key = check.key.padded(to: width)
            let state = (check.state == .ok ? "ok" : check.state.name.uppercased()).padded(to: 10)
            return "  \(key)\(state)\(check.summary)\n"
        }.joined()
    }

    /// `/healthz`'s answer: 200 `ok` when healthy, 200 with the reasons when degraded (the
    /// relay still relays: a supervisor should not restart it), 503 when failing.
    package var healthz: (status: Int, body: String) {
        switch state {
        case .ok: (200, "ok\n")
        case .degraded: (200, "degraded: " + reasons.joined(separator: "; ") + "\n")
        case .failing: (503, checks.filter { $0.state == .failing }.map(\.summary).joined(separator: "; ") + "\n")
        }
    }
}

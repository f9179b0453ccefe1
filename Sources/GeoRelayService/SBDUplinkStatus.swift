import GeoRelayCore
import GeoRelayForward

/// The SBD modem aboard as `status`, the page and the metrics show it, read from what the uplink
/// keeps in the spool (`SBDUplink`): its counters (messages, credits, failures, and the credits
/// of each day and month) and its gauges (signal, service, the last session and its MO status,
/// the alarms waiting for it).
struct SBDUplinkStatus {
    let device: String
    let messages: Int64
    let positions: Int64
    let failures: Int64
    /// Credits of the UTC day and the calendar month at the status's time, against their caps.
    let creditsToday: Int64
    let creditsThisMonth: Int64
    let dailyCap: Int
    let monthlyCap: Int
    let creditsInAll: Int64
    /// Bars, 0–5; nil: the modem has not said since the spool began.
    let signal: Int64?
    let service: Bool?
    /// The last session: when (wall ms) and its MO status (nil: the modem gave no answer).
    let lastSession: (ms: Int64, moStatus: Int64?)?
    /// Alarms IP has not delivered and the modem has not carried, at the uplink's last look.
    let alarmsWaiting: Int64

    /// The gauges' names in the spool's counters table.
    enum Gauge {
        static let signal = "sbd.signal"
        static let service = "sbd.service"
        static let lastSessionMs = "sbd.lastSessionMs"
        /// -1: the session got no answer.
        static let lastMOStatus = "sbd.lastMOStatus"
        static let alarmsWaiting = "sbd.alarmsWaiting"
    }

    init(settings: Configuration.SBDUplinkSettings, counters c: [String: Int64], nowMs: Int64) {
        device = settings.device
        messages = c["sbd.messages"] ?? 0
        positions = c["sbd.positions"] ?? 0
        failures = c["sbd.failures"] ?? 0
        creditsInAll = c["sbd.credits"] ?? 0
        let windows = SBDPlanner.creditWindows(wallMs: nowMs)
        creditsToday = c[windows.day] ?? 0
        creditsThisMonth = c[windows.month] ?? 0
        dailyCap = settings.dailyCredits
        monthlyCap = settings.monthlyCredits
        signal = c[Gauge.signal]
        service = c[Gauge.service].map { $0 != 0 }
        lastSession = c[Gauge.lastSessionMs].map { ($0, c[Gauge.lastMOStatus].flatMap { $0 < 0 ? nil : $0 }) }
        alarmsWaiting = c[Gauge.alarmsWaiting] ?? 0
    }

    /// What the last session's MO status means, in a few words.
    var lastResult: String? {
        guard let lastSession else { return nil }
        guard let status = lastSession.moStatus else { return "no answer from the modem" }
        switch SBDOutcome(moStatus: Int(clamping: status)) {
        case .sent: return "sent"
        case .retry(_, let reason): return "failed, \(reason); trying again"
        case .fatal(let reason): return "cannot send: \(reason)"
        }
    }

    var json: JSONValue {
        func num(_ value: Int64) -> JSONValue { .number(Double(value)) }
        var fields: [(String, JSONValue)] = [
            ("device", .string(device)), ("messages", num(messages)), ("credits", num(creditsInAll)),
            ("positions", num(positions)), ("failures", num(failures)),
            ("creditsToday", num(creditsToday)), ("dailyCredits", num(Int64(dailyCap))),
            ("creditsThisMonth", num(creditsThisMonth)), ("monthlyCredits", num(Int64(monthlyCap))),
            ("signal", signal.map(num) ?? .null), ("service", service.map(JSONValue.bool) ?? .null),
            ("alarmsWaiting", num(alarmsWaiting)),
        ]
        if let lastSession, let lastResult {
            fields.append(
                (
                    "lastSession",
                    .object(
                        JSONObject([
                            ("time", .string(Timestamp.iso8601(milliseconds: lastSession.ms))),
                            ("moStatus", lastSession.moStatus.map(num) ?? .null), ("result", .string(lastResult)),
                        ]))
                ))
        }
        return .object(JSONObject(fields))
    }

    /// One line for `status`: the sky, the last session, and the credits against the caps.
    var text: String {
        var parts = ["modem \(device)"]
        let sky = [signal.map { "signal \($0) of 5" }, service.map { $0 ? "in service" : "no service" }]
            .compactMap { $0 }
        parts.append(sky.isEmpty ? "not heard from yet" : sky.joined(separator: ", "))
        if let lastSession, let lastResult {
            parts.append("last session \(Timestamp.iso8601(milliseconds: lastSession.ms)): \(lastResult)")
        }
        parts.append(
            "credits today \(creditsToday) of \(dailyCap), this month \(creditsThisMonth) of \(monthlyCap)")
        parts.append("\(messages) messages, \(positions) positions, \(failures) failed sessions")
        if alarmsWaiting > 0 { parts.append("\(alarmsWaiting) alarms waiting") }
        return parts.joined(separator: "; ")
    }
}

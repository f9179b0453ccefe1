import GeoRelayCore

/// When the SBD uplink opens a session and what its message carries, without I/O: the modem is
/// the last uplink, billed by the credit, so it is used only while no IP uplink delivers, and
/// at once for an alarm; a unit's newest position at an interval, within the day's and the
/// month's credits, which only an alarm may exceed; never the history, which waits for IP.
///
/// The uplink looks (`Look`: the clock, what IP last delivered, the units' newest fixes, the
/// alarms IP has not delivered, the modem's service), asks `decide`, carries out a `.send`, and
/// reports how its session ended (`ended`). Retries follow the sky: after a failed session the
/// wait the MO status sets (`SBDOutcome`), and none while the modem has no service.
package struct SBDPlanner {
    package struct Settings: Sendable, Equatable {
        /// IP has delivered nothing for this long: SBD carries the units' positions.
        package var fallbackAfter = Duration.seconds(600)
        /// An alarm IP has not delivered within this goes by SBD, whatever IP's state.
        package var alarmGrace = Duration.seconds(30)
        /// Each unit's newest position at most this often, while IP is down.
        package var interval = Duration.seconds(900)
        /// Credits (50 bytes each) a UTC day and a calendar month, alarms aside.
        package var dailyCredits = 120
        package var monthlyCredits = 2000
        /// The vessel's units, numbered by their place (`SBDMessage.rosterCheck`).
        package var roster: [String] = []
        package var relayID: UInt32 = 0

        package init() {}
    }

    /// What the uplink sees when it asks.
    package struct Look: Sendable {
        package var now: RelayInstant
        /// Milliseconds since 1970, for the day's and the month's credits.
        package var wallMs: Int64
        /// When an IP uplink last delivered to a destination the shore relay serves; nil: not
        /// since the relay started (which counts from `startedAt`).
        package var ipDeliveredAt: RelayInstant?
        package var startedAt: RelayInstant
        /// Each roster unit's newest fix, by device id.
        package var newest: [String: Position]
        /// Alarms stored and not delivered by IP, with when each was stored.
        package var alarms: [(position: Position, storedAt: RelayInstant)]
        /// The modem reports network service (nil: not known yet, which does not hold a session).
        package var service: Bool?

        package init(
            now: RelayInstant, wallMs: Int64, ipDeliveredAt: RelayInstant?, startedAt: RelayInstant,
            newest: [String: Position], alarms: [(position: Position, storedAt: RelayInstant)], service: Bool?
        ) {
            self.now = now
            self.wallMs = wallMs
            self.ipDeliveredAt = ipDeliveredAt
            self.startedAt = startedAt
            self.newest = newest
            self.alarms = alarms
            self.service = service
        }
    }

    package enum Decision: Sendable, Equatable {
        /// A session with this message (`credits` is what it will cost when it goes).
        case send(SBDMessage, credits: Int, alarm: Bool)
        /// Nothing now: look again at `until` (nil: when something changes), and why.
        case wait(until: RelayInstant?, reason: String)
    }

    package let settings: Settings
    /// The count every composed message takes the next of.
    package private(set) var sequence: UInt32
    package private(set) var creditsToday = 0
    package private(set) var creditsThisMonth = 0
    private var day: Int64 = -1
    private var month: Int64 = -1
    private var notBefore: RelayInstant?
    package private(set) var fatal: String?
    private var lastRoutine: RelayInstant?
    /// Per unit, the newest fix time SBD has carried.
    private var carried: [String: Int64] = [:]
    /// Alarms SBD has carried (device and fix time).
    private var alarmsCarried: Set<String> = []
    /// The message a `.send` composed, until its session ends.
    private var inFlight: (message: SBDMessage, alarm: Bool)?

    /// - Parameter sequence: where the count stood when the relay last stopped (kept in the spool).
    /// - Parameter spent: what the day and the month at `wallMs` had spent before a restart (the
    ///   spool's `creditWindows` counters), so a restart does not start the caps again.
    package init(settings: Settings, sequence: UInt32 = 0, spent: (today: Int, thisMonth: Int, wallMs: Int64)? = nil) {
        self.settings = settings
        self.sequence = sequence
        if let spent {
            rollWindows(spent.wallMs)
            creditsToday = spent.today
            creditsThisMonth = spent.thisMonth
        }
    }

    /// The counter names a session's credits are kept under, for the UTC day and the calendar
    /// month of `wallMs`: a restart reads them back (`init(settings:sequence:spent:)`).
    package static func creditWindows(wallMs: Int64) -> (day: String, month: String) {
        let day = wallMs / 86_400_000
        return ("sbd.credits.day.\(day)", "sbd.credits.month.\(monthIndex(daysSince1970: day))")
    }

    package mutating func decide(_ look: Look) -> Decision {
        rollWindows(look.wallMs)
        if let fatal { return .wait(until: nil, reason: "the modem cannot send: \(fatal)") }
        if let notBefore, look.now < notBefore { return .wait(until: notBefore, reason: "waiting for the sky") }
        if look.service == false { return .wait(until: nil, reason: "no network service") }
        let silentSince = look.ipDeliveredAt ?? look.startedAt
        let ipDown = silentSince.duration(to: look.now) >= settings.fallbackAfter
        let alarms = look.alarms.filter {
            !alarmsCarried.contains(Self.key($0.position))
                && (ipDown || $0.storedAt.duration(to: look.now) >= settings.alarmGrace)
                && settings.roster.contains($0.position.device)
        }.map(\.position)
        if !alarms.isEmpty {
            return compose(alarms: alarms, look: look, creditCap: nil, withNewest: ipDown)
        }
        guard ipDown else {
            let earliestAlarm = look.alarms.map { $0.storedAt + settings.alarmGrace }.min()
            return .wait(
                until: [silentSince + settings.fallbackAfter, earliestAlarm].compactMap { $0 }.min(),
                reason: "IP delivers")
        }
        if let lastRoutine, lastRoutine.duration(to: look.now) < settings.interval {
            return .wait(until: lastRoutine + settings.interval, reason: "the interval")
        }
        let left = min(settings.dailyCredits - creditsToday, settings.monthlyCredits - creditsThisMonth)
        guard left > 0 else { return .wait(until: nil, reason: "the credit cap is spent") }
        return compose(alarms: [], look: look, creditCap: 1, withNewest: true)
    }

    /// Alarms of the roster's units in `look` that SBD has not carried: what waits for IP or
    /// for the modem, shown in status.
    package func alarmsWaiting(_ look: Look) -> Int {
        look.alarms.count {
            settings.roster.contains($0.position.device) && !alarmsCarried.contains(Self.key($0.position))
        }
    }

    /// How the session with the message `decide` composed ended.
    package mutating func ended(_ outcome: SBDOutcome, now: RelayInstant, wallMs: Int64) {
        rollWindows(wallMs)
        guard let (message, alarm) = inFlight else { return }
        inFlight = nil
        switch outcome {
        case .sent:
            notBefore = nil
            let credits = Self.credits(try? message.encode())
            creditsToday += credits
            creditsThisMonth += credits
            if !alarm || message.fixes.contains(where: { $0.alarm == nil }) { lastRoutine = now }
            for fix in message.fixes where settings.roster.indices.contains(fix.unit) {
                let device = settings.roster[fix.unit]
                carried[device] = max(carried[device] ?? .min, fix.timeSeconds * 1000)
                if fix.alarm != nil { alarmsCarried.insert("\(device) \(fix.timeSeconds)") }
            }
        case .retry(let after, _):
            notBefore = now + after
        case .fatal(let reason):
            fatal = reason
        }
    }

    /// A session that never happened (the port failed, the write was refused): the sky's wait.
    package mutating func failed(now: RelayInstant) {
        inFlight = nil
        notBefore = now + SBDOutcome.skyWait
    }

    // MARK: - The message

    /// Alarms first, each in full; then, while IP is down (`withNewest`: IP carries them
    /// otherwise, and the server would get them twice), each unit's newest fix SBD has not
    /// carried, the unit carried longest ago first, as many as fit the credits (one for a
    /// routine message; what the alarms take, and the rest of their last credit, for an alarm's).
    private mutating func compose(alarms: [Position], look: Look, creditCap: Int?, withNewest: Bool) -> Decision {
        sequence &+= 1
        let roster = SBDMessage.rosterCheck(settings.roster)
        var fixes = alarms.compactMap { fix($0) }
        func size(_ fixes: [SBDMessage.Fix]) -> Int? {
            (try? SBDMessage(relayID: settings.relayID, sequence: sequence, roster: roster, fixes: fixes).encode())?
                .count
        }
        while let bytes = size(fixes), bytes > SBDMessage.maximumBytes { fixes.removeLast() }
        let alarmBytes = size(fixes) ?? 0
        let budget =
            creditCap.map { $0 * SBDMessage.creditBytes }
            ?? max(1, (alarmBytes + SBDMessage.creditBytes - 1) / SBDMessage.creditBytes) * SBDMessage.creditBytes
        let routine = settings.roster.compactMap { device -> (Position, Int64)? in
            guard withNewest, let newest = look.newest[device], newest.timeMs > (carried[device] ?? .min) else {
                return nil
            }
            return (newest, carried[device] ?? .min)
        }.sorted { $0.1 < $1.1 }.map(\.0)
        for position in routine
        where !fixes.contains(where: { $0.unit == unit(position.device) && $0.timeSeconds == position.timeMs / 1000 }) {
            guard let candidate = fix(position), let bytes = size(fixes + [candidate]), bytes <= budget else {
                continue
            }
            fixes.append(candidate)
        }
        guard !fixes.isEmpty, let bytes = size(fixes) else {
            sequence &-= 1
            return .wait(until: nil, reason: "nothing new to carry")
        }
        let message = SBDMessage(relayID: settings.relayID, sequence: sequence, roster: roster, fixes: fixes)
        inFlight = (message, !alarms.isEmpty)
        return .send(message, credits: Self.credits(bytes), alarm: !alarms.isEmpty)
    }

    private func unit(_ device: String) -> Int? { settings.roster.firstIndex(of: device) }

    /// A stored position as the message carries it; nil for one it cannot (no roster place, a
    /// time before 2024).
    private func fix(_ position: Position) -> SBDMessage.Fix? {
        guard let unit = unit(position.device), unit < SBDMessage.maximumUnits,
            position.timeMs >= SBDMessage.epochSeconds * 1000
        else { return nil }
        return SBDMessage.Fix(
            unit: unit, timeSeconds: position.timeMs / 1000, lat: position.lat, lon: position.lon,
            speedKnots: position.speed.map { $0 * 3600 / 1852 }, course: position.course,
            alarm: position.alarm.map(SBDMessage.alarmName(for:)))
    }

    private static func key(_ position: Position) -> String { "\(position.device) \(position.timeMs / 1000)" }

    static func credits(_ bytes: [UInt8]?) -> Int { credits(bytes?.count ?? 0) }
    static func credits(_ count: Int) -> Int { max(1, (count + SBDMessage.creditBytes - 1) / SBDMessage.creditBytes) }

    /// A new UTC day or month starts its count again.
    private mutating func rollWindows(_ wallMs: Int64) {
        let today = wallMs / 86_400_000
        let thisMonth = Self.monthIndex(daysSince1970: today)
        if today != day {
            day = today
            creditsToday = 0
        }
        if thisMonth != month {
            month = thisMonth
            creditsThisMonth = 0
        }
    }

    /// Months since January 1970 of a day count (the civil calendar).
    static func monthIndex(daysSince1970 days: Int64) -> Int64 {
        let date = Timestamp.civilFromDays(Int(clamping: days))
        return Int64(date.year - 1970) * 12 + Int64(date.month - 1)
    }
}

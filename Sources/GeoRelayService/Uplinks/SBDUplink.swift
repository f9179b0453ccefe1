import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool

/// The Iridium SBD modem aboard (`sbd`): it looks every few seconds at
/// what the spool holds and what IP has delivered, asks the planner (`SBDPlanner`) whether a
/// session is due and with what, and carries it out over the modem (`SBDModemLink`). An alarm
/// stored, or the time the planner named, ends the wait between looks at the next second. A modem
/// that cannot be opened or stops answering is opened again half a minute later, said once.
///
/// The message's count and what was spent are spool counters (`sbd.sequence`, `sbd.messages`,
/// `sbd.credits`, `sbd.failures`, and the credits of each day and month): after a restart the
/// sequence goes on, and the caps count what the day and the month had already spent.
final class SBDUplink: Sendable {
    private let settings: Configuration.SBDUplinkSettings
    private let spool: Spool
    private let logger: Logger
    private let clock: any RelayClock
    /// Between looks, while the modem is quiet: five listens of a second, so a stop waits a second.
    static let looks = 5
    static let reopenAfter = Duration.seconds(30)

    init(settings: Configuration.SBDUplinkSettings, spool: Spool, logger: Logger, clock: any RelayClock) {
        self.settings = settings
        self.spool = spool
        self.logger = logger
        self.clock = clock
    }

    /// The open modem, on the queue that may block on it.
    private final class Modem {
        var link: SBDModemLink?
    }

    /// Runs until cancelled; every blocking call on the modem goes to a queue of its own.
    func run() async {
        let alarms = spool.alarms.subscribe()
        defer { spool.alarms.unsubscribe(alarms) }
        let modem = QueueConfined(label: "georelay.sbd", Modem())
        let (settings, clock, modemSettings) = (self.settings, self.clock, self.modemSettings)
        let started = clock.now()
        var planner = restoredPlanner()
        var service: Bool?
        var shown = Shown(spool: spool)
        var reader: SpoolReader?
        var saidPortProblem = false
        while !Task.isCancelled {
            do {
                let opened = try await modem.run { modem throws -> [SBDModem.Event]? in
                    guard modem.link == nil else { return nil }
                    let link = SBDModemLink(
                        port: try SBDPort(path: settings.device, baud: settings.baud), settings: modemSettings,
                        clock: clock)
                    let events = try link.start()
                    guard events.contains(.ready) else {
                        throw SBDPortError("the modem at \(settings.device) did not set up: \(events)")
                    }
                    modem.link = link
                    return events
                }
                if let opened {
                    service = shown.observe(opened) ?? service
                    saidPortProblem = false
                    logger.info("modem at \(settings.device) ready")
                }
                if reader == nil { reader = try? spool.makeReader() }
                // A spool that cannot be read now is looked at again with a new reader; it is no
                // reason to close the modem, which the catch below is for.
                let seen = reader.flatMap { try? look($0, started: started, service: service) }
                if seen == nil { reader = nil }
                if let seen { shown.set(SBDUplinkStatus.Gauge.alarmsWaiting, planner.alarmsWaiting(seen.look)) }
                let decision = seen.map { planner.decide($0.look) }
                if let seen, case .send(let message, let credits, let alarm)? = decision {
                    spool.add(counters: ["sbd.sequence": 1])
                    let bytes = (try? message.encode()) ?? []
                    let events = try await modem.run { try $0.link!.send(bytes) }
                    service = shown.observe(events) ?? service
                    let sent = record(events, message: message, credits: credits, alarm: alarm, planner: &planner)
                    if sent { carried(message, seqs: seen.seqs) }
                } else {
                    // Listening a second at a time: indications arrive meanwhile, and an alarm or the
                    // planner's time ends the wait at the next second rather than the next look.
                    var due: RelayInstant?
                    if case .wait(let until, _)? = decision { due = until }
                    for _ in 0..<Self.looks where !Task.isCancelled {
                        let events = try await modem.run { try $0.link!.listen(within: .seconds(1)) }
                        service = shown.observe(events) ?? service
                        if alarms.takePending() || due.map({ clock.now() >= $0 }) == true { break }
                    }
                }
            } catch {
                await modem.run { $0.link = nil }
                planner.failed(now: clock.now())
                if !saidPortProblem {
                    logger.warning("\((error as? SBDPortError)?.message ?? "\(error)"); trying again every 30 s")
                    saidPortProblem = true
                }
                await clock.sleep(for: Self.reopenAfter)
            }
        }
    }

    /// What SBD carried counts as sent ahead for every destination the shore relay serves: the
    /// shore delivered it, so IP skips it when the backlog reaches it (as it skips an alarm it
    /// sent ahead), and Traccar does not get it twice.
    private func carried(_ message: SBDMessage, seqs: [String: Int64]) {
        let carried = message.fixes.compactMap { fix in
            settings.units.indices.contains(fix.unit) ? seqs["\(settings.units[fix.unit]) \(fix.timeSeconds)"] : nil
        }
        guard !carried.isEmpty else { return }
        for destination in settings.destinations {
            var update = DeliveryUpdate(destination: destination)
            update.sentAhead = carried
            spool.record(update)
        }
    }

    /// What the session's events say, told to the planner, the counters and the log. - Returns:
    /// whether the message went.
    @discardableResult
    private func record(
        _ events: [SBDModem.Event], message: SBDMessage, credits: Int, alarm: Bool, planner: inout SBDPlanner
    ) -> Bool {
        let now = clock.now()
        let wallMs = clock.nowMs()
        let result = events.lazy.compactMap({ if case .session(let r) = $0 { r } else { nil } }).first
        spool.set(gauges: [
            SBDUplinkStatus.Gauge.lastSessionMs: wallMs,
            SBDUplinkStatus.Gauge.lastMOStatus: result.map { Int64($0.moStatus) } ?? -1,
        ])
        guard let result else {
            let reason = events.lazy.compactMap { if case .failed(let why) = $0 { why } else { nil } }.first
            planner.failed(now: now)
            spool.add(counters: ["sbd.failures": 1])
            logger.warning("message \(message.sequence) did not go: \(reason ?? "no answer")")
            return false
        }
        planner.ended(result.outcome, now: now, wallMs: wallMs)
        switch result.outcome {
        case .sent:
            let windows = SBDPlanner.creditWindows(wallMs: wallMs)
            spool.add(counters: [
                "sbd.messages": 1, "sbd.credits": Int64(credits), "sbd.positions": Int64(message.fixes.count),
                windows.day: Int64(credits), windows.month: Int64(credits),
            ])
            logger.info(
                "message \(message.sequence) sent (MOMSN \(result.momsn)): \(message.fixes.count) positions\(alarm ? ", an alarm" : ""), \(credits) credits"
            )
            return true
        case .retry(let after, let reason):
            spool.add(counters: ["sbd.failures": 1])
            logger.info("session failed, \(reason); again in \(after)")
            return false
        case .fatal(let reason):
            spool.add(counters: ["sbd.failures": 1])
            logger.error("the modem cannot send: \(reason); no more sessions until the relay restarts")
            return false
        }
    }

    /// The spool and IP's state as the planner takes it, and the spool's number for each fix in
    /// it (by device and fix second), to mark what a message carried.
    private func look(_ reader: SpoolReader, started: RelayInstant, service: Bool?) throws(SpoolError)
        -> (look: SBDPlanner.Look, seqs: [String: Int64])
    {
        let now = clock.now()
        let wallMs = clock.nowMs()
        /// A wall-clock time as an instant of the relay's clock: as long ago as it was.
        func instant(_ ms: Int64) -> RelayInstant { now - .milliseconds(max(0, wallMs - ms)) }
        let status = try reader.status()
        let served = status.destinations.filter { settings.destinations.contains($0.name) }
        let delivered = served.compactMap(\.lastSuccessMs).max().map(instant)
        var alarms: [Int64: (position: Position, storedAt: RelayInstant)] = [:]
        var seqs: [String: Int64] = [:]
        for destination in served {
            for stored in try reader.pendingAlarms(destination: destination.name).unsent {
                alarms[stored.seq] = (stored.position, instant(stored.receivedMs))
                seqs["\(stored.position.device) \(stored.position.timeMs / 1000)"] = stored.seq
            }
        }
        let newest = try reader.newestFixes(devices: settings.units)
        for stored in newest.values { seqs["\(stored.position.device) \(stored.position.timeMs / 1000)"] = stored.seq }
        let look = SBDPlanner.Look(
            now: now, wallMs: wallMs, ipDeliveredAt: delivered.map { max($0, started) }, startedAt: started,
            newest: newest.mapValues(\.position), alarms: alarms.keys.sorted().map { alarms[$0]! }, service: service)
        return (look, seqs)
    }

    private var plannerSettings: SBDPlanner.Settings {
        var planner = SBDPlanner.Settings()
        planner.roster = settings.units
        planner.relayID = settings.relayID
        planner.fallbackAfter = .milliseconds(Int64(settings.fallbackSeconds * 1000))
        planner.alarmGrace = .milliseconds(Int64(settings.alarmGraceSeconds * 1000))
        planner.interval = .milliseconds(Int64(settings.intervalSeconds * 1000))
        planner.dailyCredits = settings.dailyCredits
        planner.monthlyCredits = settings.monthlyCredits
        return planner
    }

    private var modemSettings: SBDModem.Settings {
        var modem = SBDModem.Settings()
        modem.flowControl = settings.flowControl
        return modem
    }

    /// The planner where the last run left it: its sequence, and the credits of this day and month.
    private func restoredPlanner() -> SBDPlanner {
        let counters = (try? spool.makeReader().status().counters) ?? [:]
        let wallMs = clock.nowMs()
        let windows = SBDPlanner.creditWindows(wallMs: wallMs)
        return SBDPlanner(
            settings: plannerSettings, sequence: UInt32(truncatingIfNeeded: counters["sbd.sequence"] ?? 0),
            spent: (Int(counters[windows.day] ?? 0), Int(counters[windows.month] ?? 0), wallMs))
    }

    /// What status shows of the modem, set in the spool as it changes (a signal indication comes
    /// with every bar the sky moves; the spool writes it with its next state).
    private struct Shown {
        let spool: Spool
        private var values: [String: Int64] = [:]

        init(spool: Spool) { self.spool = spool }

        mutating func set(_ gauge: String, _ value: Int) {
            guard values[gauge] != Int64(value) else { return }
            values[gauge] = Int64(value)
            spool.set(gauges: [gauge: Int64(value)])
        }

        /// Takes the modem's signal and service indications. - Returns: the service it last reported, if any.
        mutating func observe(_ events: [SBDModem.Event]) -> Bool? {
            var service: Bool?
            for event in events {
                switch event {
                case .signal(let bars): set(SBDUplinkStatus.Gauge.signal, bars)
                case .service(let on):
                    service = on
                    set(SBDUplinkStatus.Gauge.service, on ? 1 : 0)
                default: break
                }
            }
            return service
        }
    }
}

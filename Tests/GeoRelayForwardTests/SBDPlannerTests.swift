import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// When the SBD uplink sends and what, decision by decision on a clock the test moves.
@Suite(.offThePool) struct SBDPlannerTests {
    static let roster = ["gps-bow", "gps-stern", "ais", "mob"]
    static let start = RelayInstant.origin + .seconds(100)
    /// 2026-07-25T04:30:00Z.
    static let wall: Int64 = 1_784_953_800_000

    static func planner(_ change: (inout SBDPlanner.Settings) -> Void = { _ in }) -> SBDPlanner {
        var settings = SBDPlanner.Settings()
        settings.roster = roster
        change(&settings)
        return SBDPlanner(settings: settings)
    }

    /// Each unit's newest fix, `second` seconds after `wall`, metres apart.
    static func newest(at second: Int64) -> [String: Position] {
        Dictionary(
            uniqueKeysWithValues: roster.enumerated().map { index, device in
                (
                    device,
                    Position(
                        device: device, timeMs: wall + second * 1000, lat: 59.9 + Double(index) * 0.00003,
                        lon: 10.7 + Double(index) * 0.00002, speed: 3, course: 45)
                )
            })
    }

    static func look(
        after seconds: Int64, ipDeliveredAt: RelayInstant? = nil, fixesAt: Int64? = nil,
        alarms: [(position: Position, storedAt: RelayInstant)] = [], service: Bool? = true
    ) -> SBDPlanner.Look {
        SBDPlanner.Look(
            now: start + .seconds(seconds), wallMs: wall + seconds * 1000, ipDeliveredAt: ipDeliveredAt,
            startedAt: start, newest: newest(at: fixesAt ?? seconds), alarms: alarms, service: service)
    }

    static func sent(_ decision: SBDPlanner.Decision) -> (SBDMessage, Int, Bool)? {
        if case .send(let message, let credits, let alarm) = decision { (message, credits, alarm) } else { nil }
    }

    @Test func whileIPDeliversNothingGoesAndTheFallbackIsAwaited() {
        var planner = Self.planner()
        let decision = planner.decide(Self.look(after: 300, ipDeliveredAt: Self.start + .seconds(290)))
        #expect(decision == .wait(until: Self.start + .seconds(890), reason: "IP delivers"))
    }

    /// Ten minutes without IP: the four units' newest positions in one credit, then nothing until
    /// the interval, and then only what is new.
    @Test func afterTheFallbackEachUnitsNewestGoesInOneCreditAtTheInterval() throws {
        var planner = Self.planner()
        let (message, credits, alarm) = try #require(Self.sent(planner.decide(Self.look(after: 600))))
        #expect(credits == 1 && !alarm && message.fixes.count == 4 && message.sequence == 1)
        #expect(message.roster == SBDMessage.rosterCheck(Self.roster))
        #expect(Set(message.fixes.map(\.unit)) == [0, 1, 2, 3])
        planner.ended(.sent, now: Self.start + .seconds(660), wallMs: Self.wall + 660_000)
        #expect(planner.creditsToday == 1 && planner.creditsThisMonth == 1)
        #expect(
            planner.decide(Self.look(after: 700)) == .wait(until: Self.start + .seconds(1560), reason: "the interval"))
        // The interval past, but no unit has a newer fix: nothing, and no sequence number spent.
        #expect(
            planner.decide(Self.look(after: 1600, fixesAt: 600)) == .wait(until: nil, reason: "nothing new to carry"))
        let next = try #require(Self.sent(planner.decide(Self.look(after: 1600))))
        #expect(next.0.sequence == 2 && next.0.fixes.count == 4)
    }

    /// An alarm IP has not delivered within the grace goes at once, IP up or not, with the units'
    /// newest in what is left of its credit; once carried, it does not go again.
    @Test func anAlarmGoesAtOnceAndOnce() throws {
        var planner = Self.planner()
        var sos = Self.newest(at: 120)["mob"]!
        sos.alarm = "sos"
        let alarms = [(position: sos, storedAt: Self.start + .seconds(120))]
        let early = planner.decide(
            Self.look(after: 130, ipDeliveredAt: Self.start + .seconds(100), alarms: alarms))
        #expect(early == .wait(until: Self.start + .seconds(150), reason: "IP delivers"), "within the grace")
        let (message, credits, alarm) = try #require(
            Self.sent(planner.decide(Self.look(after: 150, ipDeliveredAt: Self.start + .seconds(100), alarms: alarms))))
        #expect(alarm && credits == 1 && message.fixes.first?.alarm == "sos" && message.fixes.first?.unit == 3)
        #expect(message.fixes.count == 1, "IP carries the units' positions: the alarm alone")
        planner.ended(.sent, now: Self.start + .seconds(160), wallMs: Self.wall + 160_000)
        let after = planner.decide(Self.look(after: 170, ipDeliveredAt: Self.start + .seconds(100), alarms: alarms))
        #expect(Self.sent(after) == nil, "\(after)")
    }

    @Test func failuresWaitForTheSkyAndFatalOnesStop() throws {
        var planner = Self.planner()
        _ = try #require(Self.sent(planner.decide(Self.look(after: 600))))
        planner.ended(.retry(after: .seconds(180), reason: "36"), now: Self.start + .seconds(610), wallMs: Self.wall)
        #expect(
            planner.decide(Self.look(after: 700))
                == .wait(until: Self.start + .seconds(790), reason: "waiting for the sky"))
        #expect(
            planner.decide(Self.look(after: 800, service: false)) == .wait(until: nil, reason: "no network service"))
        _ = try #require(Self.sent(planner.decide(Self.look(after: 800))))
        #expect(planner.creditsToday == 0, "a failed session is not billed")
        planner.ended(.fatal(reason: "antenna fault (33)"), now: Self.start + .seconds(810), wallMs: Self.wall)
        #expect(
            planner.decide(Self.look(after: 5000))
                == .wait(until: nil, reason: "the modem cannot send: antenna fault (33)"))
    }

    /// The day's credits spent: routine positions wait for the next UTC day; an alarm does not.
    @Test func theCreditCapHoldsRoutinePositionsButNotAlarms() throws {
        var planner = Self.planner { $0.dailyCredits = 2 }
        var second: Int64 = 600
        for _ in 0..<2 {
            _ = try #require(Self.sent(planner.decide(Self.look(after: second))))
            planner.ended(.sent, now: Self.start + .seconds(second), wallMs: Self.wall + second * 1000)
            second += 900
        }
        #expect(planner.decide(Self.look(after: second)) == .wait(until: nil, reason: "the credit cap is spent"))
        var sos = Self.newest(at: second)["gps-bow"]!
        sos.alarm = "sos"
        let alarm = Self.sent(
            planner.decide(Self.look(after: second, alarms: [(position: sos, storedAt: Self.start + .seconds(second))]))
        )
        // IP down: the alarm, and the units' newest in the rest of its credit; the alarm's unit's
        // newest is the alarm itself, carried once.
        #expect(alarm?.2 == true && alarm?.0.fixes.first?.alarm == "sos" && alarm?.0.fixes.count == 4)
        // 04:30 + a day: a new UTC day, a new count.
        let tomorrow = Self.sent(planner.decide(Self.look(after: 86_400)))
        #expect(tomorrow != nil && planner.creditsToday == 0)
    }

    /// Units far apart (a fleet) do not all fit one credit: those left out go first next time.
    @Test func unitsThatDoNotFitGoFirstNextTime() throws {
        let fleet = (0..<8).map { "unit-\($0)" }
        var planner = Self.planner { $0.roster = fleet }
        func look(_ second: Int64) -> SBDPlanner.Look {
            var look = Self.look(after: second)
            look.newest = Dictionary(
                uniqueKeysWithValues: fleet.enumerated().map { index, device in
                    (
                        device,
                        Position(
                            device: device, timeMs: Self.wall + second * 1000, lat: -40 + Double(index) * 10,
                            lon: -150 + Double(index) * 40)
                    )
                })
            return look
        }
        let first = try #require(Self.sent(planner.decide(look(600))))
        #expect(first.0.fixes.count < 8 && first.1 == 1, "\(first.0.fixes.count) fixes")
        planner.ended(.sent, now: Self.start + .seconds(600), wallMs: Self.wall + 600_000)
        let second = try #require(Self.sent(planner.decide(look(1500))))
        let left = Set(0..<8).subtracting(first.0.fixes.map(\.unit))
        #expect(
            left.isSubset(of: Set(second.0.fixes.map(\.unit))), "left out: \(left), then \(second.0.fixes.map(\.unit))")
    }

    /// A restart keeps what the day had spent: the cap holds across it.
    @Test func creditsSpentBeforeARestartCountAgainstTheCap() {
        var planner = SBDPlanner(
            settings: Self.planner { $0.dailyCredits = 2 }.settings, sequence: 40,
            spent: (today: 2, thisMonth: 30, wallMs: Self.wall))
        #expect(planner.creditsToday == 2 && planner.creditsThisMonth == 30)
        #expect(planner.decide(Self.look(after: 600)) == .wait(until: nil, reason: "the credit cap is spent"))
        let windows = SBDPlanner.creditWindows(wallMs: Self.wall)
        #expect(windows.day == "sbd.credits.day.\(Self.wall / 86_400_000)")
        #expect(windows.month == "sbd.credits.month.\((2026 - 1970) * 12 + 6)", "July 2026")
    }

    @Test func monthsAreCountedByTheCivilCalendar() {
        #expect(SBDPlanner.monthIndex(daysSince1970: 0) == 0)
        #expect(SBDPlanner.monthIndex(daysSince1970: 30) == 0)
        #expect(SBDPlanner.monthIndex(daysSince1970: 31) == 1)
        // 2026-12-07 and 2024-02-29.
        #expect(SBDPlanner.monthIndex(daysSince1970: 20_794) == (2026 - 1970) * 12 + 11)
        #expect(SBDPlanner.monthIndex(daysSince1970: 19_782) == (2024 - 1970) * 12 + 1)
    }
}

import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// The real binary through days or weeks of its own time (issue 37 §2): what the in-process
/// simulation cannot see, the system clock read where the relay reads it, Dispatch's timers,
/// the `status` command, the token's schedule on the steadied clock, the uplink monitor's UTC
/// day and the spool's upkeep.
///
/// libfaketime with the test kit's timer shim (`FakeTime`) moves the relay's wall and monotonic
/// clocks forward 15 minutes at a step, and a collector writes one fix after each step, to the
/// fake Traccar server and the fake push gateway over one uplink (loopback) with a day budget
/// and a month budget. The run starts in December, so that the month budget (a day and a half
/// less than December's days of the run, in day budgets) is spent on 30 December, holds through
/// the 31st and frees on 1 January; it lasts the rest of the run.
///
/// Checked:
/// - every fix is answered `ok`, and is delivered to both destinations or held by the budget
///   (status says `deferred`);
/// - the budget is spent every day; a day budget frees at UTC midnight (delivery resumes at
///   both destinations), a month budget holds through the next day and frees on the 1st; no day
///   carries more than its budget and a tenth (what was already on its way when it ran out);
/// - the push token is refreshed on its 24-hour schedule in the relay's time: no push goes with a
///   token 24 h old, no refresh comes early, none is used after its expiry (25 h);
/// - the spool's rows stay within the backlog and the last `retainHours` (48) of fixes, and fall
///   to none 50 h after the last fix once everything is delivered;
/// - once the budget is lifted (a reload), every fix reaches both destinations.
///
/// `GEORELAY_FAKETIME_DAYS=30` (`make faketime-month`) runs 30 days (about 40 s); `make test`
/// runs 4 (about 10 s), the fewest that hold a day budget spent, a month budget spent, a day it
/// holds and the 1st.
@Suite(.offThePool) struct FakeTimeMonthTests {
    static let dayMs: Int64 = 86_400_000
    static let stepMs: Int64 = 15 * 60_000
    /// 2027-01-01T00:00:00Z: the month budget is spent before it.
    static let newYearMs: Int64 = 1_798_761_600_000
    static let retainHours = 48
    /// About 53 fixes sent one at a time (both destinations, about 750 B a fix on loopback), or a
    /// day's 96 when most go in the morning's backlog rounds: spent every morning or afternoon.
    static let dayBytes: Int64 = 40_000

    /// One simulated day as the test saw it.
    struct Day: CustomStringConvertible {
        var date: String
        /// When status first showed the destinations deferred (`HH:MM`), and why.
        var deferredAt: String?
        var reason: String?
        /// At the day's last step: the uplink's bytes today and this month, the spool's rows, positions pending.
        var wireBytes = 0.0
        var monthWireBytes = 0.0
        var rows = 0.0
        var pending = 0.0
        var monthSpent: Bool { reason?.contains("month budget") == true }

        var description: String {
            let deferral = reason.map { _ in
                "deferred from \(deferredAt ?? "?") (\(monthSpent ? "month" : "day") budget)"
            }
            return
                "\(date): \(deferral ?? "not deferred"), \(Int(wireBytes)) B (month \(Int(monthWireBytes)) B), \(Int(rows)) rows, \(Int(pending)) pending"
        }
    }

    @Test func daysOfTheRelaysOwnTimeOnLibfaketime() async throws {
        let days = Int(ProcessInfo.processInfo.environment["GEORELAY_FAKETIME_DAYS"] ?? "") ?? 4
        try #require(
            days >= 4,
            "GEORELAY_FAKETIME_DAYS must be at least 4: a day budget spent, a month budget spent, held, freed")
        // December's days of the run: enough that January's days at most a day budget each
        // (backlog included) stay within the month budget, and one day at least in January.
        let decemberDays = min(days - 1, max(3, (days + 4) / 2))
        let dayBytes = Self.dayBytes
        let monthBytes = dayBytes * Int64(2 * decemberDays - 3) / 2
        let startMs = Self.newYearMs - Int64(decemberDays) * Self.dayMs + 20 * 60_000
        let endMs = startMs + Int64(days) * Self.dayMs
        let began = ContinuousClock.now

        let clock = try FakeTime(startMs: startMs)
        let world = try RelayWorld()
        let push = try FakePushServer(now: { clock.nowMs() })
        defer { push.http.stop() }
        push.setExpiresIn(25 * 3600)
        func writeConfig(budget: Bool) throws {
            // minIntervalSeconds of a year: no still-alive position goes while the budget is spent,
            // so what a day carries is what its budget allowed.
            let budgetText = budget ? "budget: { dayBytes: \(dayBytes), monthBytes: \(monthBytes) }," : ""
            try world.writeConfig(
                spool: "retainHours: \(Self.retainHours)", moreDestinations: pushDestination(push),
                topLevel: """
                    uplinks: [{ name: "loop", interface: "lo", metered: true, \(budgetText)
                      send: { minIntervalSeconds: 31536000 } }],
                    """)
        }
        try writeConfig(budget: true)
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path,
            environment: clock.environment)
        func said() -> String { "the relay said:\n\(relay.stderrText().suffix(3000))" }
        let client = try world.client()

        var statusReads = 0
        /// `status --json` on the relay's faked clock (its day is the relay's), reduced to what is checked.
        func look() throws -> (deferred: String?, rows: Double, pending: Double, today: Double, month: Double) {
            statusReads += 1
            let result = try RelayProcess.run(
                RelayProcess.binary, ["status", "--json", "--config", world.configPath],
                directory: world.directory.path, environment: clock.environment)
            guard result.status == 0, case .object(let status) = try JSONParser.parse(result.stdout) else {
                throw RelayProcessError(message: "status failed: \(result.stderr)")
            }
            let destinations = status["destinations"]?.array ?? []
            let uplink = status["uplinks"]?.array?.first
            return (
                destinations.first { $0["state"]?.string == "deferred" }.map { $0["lastError"]?.string ?? "" },
                status["spool"]?["rows"]?.number ?? -1,
                destinations.reduce(0) { $0 + ($1["pending"]?.number ?? 0) },
                uplink?["wireBytesToday"]?.number ?? -1, uplink?["wireBytesThisMonth"]?.number ?? -1
            )
        }
        var sent: [Int64] = []
        func arrivals() -> (traccar: Int, gateway: Int) { (world.server.positions.count, push.points.count) }

        var record = [Day(date: String(Timestamp.iso8601(milliseconds: clock.nowMs()).prefix(10)))]
        var deferredToday = false
        var resumedAfterMidnight = 0
        var monthHeldDays = 0
        var monthFreedOnTheFirst = false
        /// Arrivals at the start of a day the month budget holds: the same at its end.
        var heldFrom: (traccar: Int, gateway: Int)?
        var maxRows = 0.0

        while clock.nowMs() + Self.stepMs <= endMs {
            let today = record[record.count - 1]
            let next = String(Timestamp.iso8601(milliseconds: clock.nowMs() + Self.stepMs).prefix(10))
            if next != today.date {
                // The day's last step: its figures before midnight.
                let seen = try look()
                record[record.count - 1].wireBytes = seen.today
                record[record.count - 1].monthWireBytes = seen.month
                record[record.count - 1].rows = seen.rows
                record[record.count - 1].pending = seen.pending
                maxRows = max(maxRows, seen.rows)
                #expect(
                    seen.today <= Double(dayBytes) * 1.1 && seen.month <= Double(monthBytes) * 1.1,
                    "\(today.date): \(seen.today) B carried today, \(seen.month) B this month, over a budget of \(dayBytes) B a day and \(monthBytes) B a month and a tenth"
                )
                // Retention: what is delivered everywhere and older than retainHours is gone.
                let recent = sent.filter { $0 > clock.nowMs() - Int64(Self.retainHours + 1) * 3_600_000 }.count
                #expect(
                    seen.rows <= seen.pending + Double(recent) + 2,
                    "\(today.date): \(seen.rows) rows in the spool, more than the \(seen.pending) pending and the \(recent) received in the last \(Self.retainHours) h"
                )
                if let held = heldFrom {
                    #expect(
                        arrivals() == held,
                        "\(today.date): the month budget was spent all day, yet positions arrived: \(held) at its start, \(arrivals()) at its end"
                    )
                    monthHeldDays += 1
                    heldFrom = nil
                }
            }

            try clock.advance(by: .milliseconds(Self.stepMs))
            let nowMs = clock.nowMs()
            let at = Timestamp.iso8601(milliseconds: nowMs)
            let fix = max(nowMs / 1000 * 1000, (sent.last ?? 0) + 1000)
            try client.write(
                #"{"device":"ship","time":\#(fix / 1000),"lat":\#(59.0 + Double(sent.count % 500) / 1000),"lon":10.7,"speed":3}"#
                    + "\n")
            let reply = try #require(client.readLine(), "fix \(at): no answer within 30 s; \(said())")
            #expect(reply.hasPrefix("ok "), "fix \(at): \(reply)")
            sent.append(fix)

            if next != today.date {
                // This step crossed midnight.
                let firstOfMonth = next.hasSuffix("-01")
                record.append(Day(date: next))
                deferredToday = false
                if today.reason != nil, !today.monthSpent || firstOfMonth {
                    // A new day frees a day budget, the 1st a month budget: the backlog moves at both.
                    let before = arrivals()
                    async let traccarMoved = world.server.waitUntil(timeout: .seconds(60)) { $0.count > before.traccar }
                    async let gatewayMoved = push.waitUntil(timeout: .seconds(60)) { $0.count > before.gateway }
                    let moved = await (traccarMoved, gatewayMoved)
                    #expect(
                        moved == (true, true),
                        "\(at): after midnight delivery did not resume within 60 s (Traccar \(moved.0), gateway \(moved.1)) after \(today); \(said())"
                    )
                    if moved == (true, true) {
                        resumedAfterMidnight += 1
                        if today.monthSpent { monthFreedOnTheFirst = true }
                    }
                } else if today.monthSpent {
                    heldFrom = arrivals()
                }
            }

            // Delivered to both, or held by the spent budget: then the rest of the day is held too.
            guard !deferredToday else { continue }
            let expected = ["ship": Set([fix])]
            let deadline = ContinuousClock.now + .seconds(60)
            while true {
                async let atTraccar = world.server.waitForAll(expected, timeout: .milliseconds(500))
                async let atGateway = push.waitForAll(expected, timeout: .milliseconds(500))
                if await (atTraccar, atGateway) == (true, true) { break }
                if let reason = try look().deferred {
                    deferredToday = true
                    record[record.count - 1].deferredAt = String(at.dropFirst(11).prefix(5))
                    record[record.count - 1].reason = reason
                    break
                }
                guard ContinuousClock.now < deadline else {
                    Issue.record(
                        "fix \(at): neither delivered to both destinations nor deferred by the budget within 60 s; \(said())"
                    )
                    break
                }
            }
        }
        let simulated = ContinuousClock.now - began

        // Every whole day spent its budget (the last day is the run's last few minutes).
        for day in record.dropLast() {
            #expect(day.reason != nil, "\(day.date): the budget was never spent (\(day.wireBytes) B carried)")
        }
        #expect(monthHeldDays >= 1, "no day was held by the month budget: \(record)")
        #expect(monthFreedOnTheFirst, "the month budget spent before the 1st was not freed by it: \(record)")

        // The budget lifted, everything goes.
        try writeConfig(budget: false)
        relay.signal(SIGHUP)
        let everything = ["ship": Set(sent)]
        async let traccarAll = world.server.waitForAll(everything, timeout: .seconds(120))
        async let gatewayAll = push.waitForAll(everything, timeout: .seconds(120))
        let delivered = await (traccarAll, gatewayAll)
        let atTraccar = Set(world.server.positions.map(\.fixTimeMs))
        let atGateway = Set(push.points.compactMap { Timestamp.milliseconds(fromISO8601: $0.timestamp) })
        #expect(
            delivered == (true, true),
            "after the budget was lifted: \(Set(sent).subtracting(atTraccar).count) fixes missing at Traccar, \(Set(sent).subtracting(atGateway).count) at the gateway; \(said())"
        )

        // Retention: 50 h on with nothing new, the delivered rows are gone.
        let rowsBefore = try look().rows
        let lastFixMs = clock.nowMs()
        while clock.nowMs() < lastFixMs + Int64(Self.retainHours + 2) * 3_600_000 {
            try clock.advance(by: .seconds(3600))
            try await Task.sleep(for: .milliseconds(20)) // lets the upkeep and the looks run as the hours pass
        }
        var rowsAfter = try look().rows
        let retentionDeadline = ContinuousClock.now + .seconds(30)
        while rowsAfter > 0, ContinuousClock.now < retentionDeadline {
            try await Task.sleep(for: .milliseconds(200)) // the upkeep runs on its own timer: no event to await
            rowsAfter = try look().rows
        }
        #expect(
            rowsAfter == 0,
            "\(Self.retainHours + 2) h after the last fix, all delivered: \(rowsAfter) rows still in the spool (\(rowsBefore) before)"
        )

        // The token, on its 24-hour schedule in the relay's time.
        let issued = push.tokensIssuedAtMs
        let gaps = zip(issued.dropFirst(), issued).map { $0 - $1 }
        let oldest = push.tokenAgesAtPush.max() ?? 0
        let hours = { (ms: Int64) in String(format: "%.2f", Double(ms) / 3_600_000) }
        #expect(push.expiredTokenUses == 0, "a token was used after it expired (\(push.expiredTokenUses) times)")
        #expect(oldest < Self.dayMs, "a push went with a token \(hours(oldest)) h old: not refreshed at 24 h")
        #expect(
            gaps.allSatisfy { $0 >= Self.dayMs - 60_000 },
            "a token was refreshed before its 24 h: gaps \(gaps.map(hours)) h")
        #expect(issued.count >= 2, "the token was never refreshed in \(days) days")
        #expect(push.problems.isEmpty, "\(push.problems)")
        #expect(relay.process.isRunning, "the relay exited: \(said())")
        try expectNoSecrets(world, relay: relay, push: push)

        print(
            """
            faketime: \(days) simulated days in \(simulated) (\(sent.count) fixes, \(statusReads) status reads), \
            day budget \(dayBytes) B, month budget \(monthBytes) B; delivery resumed after \(resumedAfterMidnight) midnights, \
            \(monthHeldDays) days held by the month budget, freed on the 1st; \(issued.count) tokens issued (gaps \
            \(gaps.map(hours).joined(separator: " ")) h; oldest at a push \(hours(oldest)) h; \(push.expiredTokenUses) \
            used expired); spool at most \(Int(maxRows)) rows, \(Int(rowsBefore)) after the drain, \(Int(rowsAfter)) \
            \(Self.retainHours + 2) h later; \(atTraccar.count) fixes at Traccar, \(atGateway.count) at the gateway (\
            \(world.server.positions.count - atTraccar.count) and \(push.points.count - atGateway.count) twice); \
            \(ContinuousClock.now - began) in all
              \(record.dropLast().map(\.description).joined(separator: "\n  "))
            """)
    }
}

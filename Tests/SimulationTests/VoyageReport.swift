import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit

/// What a voyage did and what broke its invariants, each with the day it was found.
struct VoyageReport: CustomStringConvertible {
    var seed: UInt64
    var days: Int
    var stored = 0
    /// Lines the ingest refused (`err`), with the first few replies.
    var refusedLines = 0
    var refusals: [String] = []
    var delivered = 0
    var outages = 0
    var outageHours = 0.0
    var restarts = 0
    var crashes = 0
    var clockSteps = 0
    /// Restores of the Traccar server from a backup, and the positions `georelay replay` queued after them.
    var restores = 0
    /// Maintenance windows (503s) at Traccar and at the gateway, and Traccar's 503 answers.
    var maintenance = 0
    var answered503 = 0
    var replayed = 0
    var alarms = 0
    /// The most steps an alarm arrived after the first step the link was up once it was stored.
    var latestAlarmSteps = 0
    var largestSpoolBytes: Int64 = 0
    var largestSpoolRows = 0
    var largestLogRows = 0
    /// The satellite's most in a day and a month until its budget was spent, and what went after
    /// (alarms and still-alive positions).
    var largestDayBytes: Int64 = 0
    var largestMonthBytes: Int64 = 0
    var largestRestrictedDayBytes: Int64 = 0
    /// The day of the most carried under a spent budget, and push's part of it.
    var largestRestricted = ""
    /// The most a day or month carried again after a crash, before the budget was spent.
    var resentBytes: Int64 = 0
    var rounds = 0
    var pushDelivered = 0
    var pushDuplicates = 0
    var pushBatches = 0
    var tokens = 0
    var expiredTokenUses = 0
    /// Fixes the server got more than once, replays aside (at least once allows them after a
    /// restart or a crash).
    var duplicates = 0
    /// The process's resident memory at the end of the first day and the largest after.
    var firstDayRSS: Int64 = 0
    var largestRSS: Int64 = 0
    /// The resident memory every 30 days, and every day.
    var monthlyRSS: [Int64] = []
    var dailyRSS: [Int64] = []
    /// Whether the voyage runs alone in its process, so memory and storage figures are its own.
    var alone = false
    /// Bytes written to the spool's files per day (`StorageWrites`; counts other tests' writes
    /// too when they run in the same process, so meaningful from `make simulate` alone).
    var storageBytes: [Int64] = []
    /// What broke an invariant, with the day it was found; empty when all held.
    var problems: [String] = []
    var seconds = 0.0

    init(seed: UInt64, days: Int, voyage: Voyage) {
        self.seed = seed
        self.days = days
        outages = voyage.outages.count
        outageHours = voyage.outages.reduce(0) { $0 + Double($1.untilMs - $1.fromMs) / 3_600_000 }
        restarts = voyage.restarts.count
        crashes = voyage.restarts.filter(\.crash).count
        clockSteps = voyage.clockSteps.count / 2
        maintenance = voyage.maintenance.count + voyage.traccarMaintenance.count
    }

    var description: String {
        let storage = storageBytes.isEmpty ? 0 : storageBytes.reduce(0, +) / Int64(storageBytes.count)
        return
            "seed \(seed): \(days) days, \(stored) fixes answered ok (\(refusedLines) refused\(refusals.isEmpty ? "" : ": \(refusals.prefix(2))")), "
            + "\(delivered) delivered in \(rounds) rounds "
            + "(\(duplicates) twice), push \(pushDelivered) in \(pushBatches) batches (\(pushDuplicates) twice) "
            + "with \(tokens) tokens (\(expiredTokenUses) pushes with an expired one), \(alarms) alarms (at most \(latestAlarmSteps) steps after the link was up), "
            + "\(outages) outages (\(Int(outageHours)) h down), \(restarts) restarts (\(crashes) crashes), \(clockSteps) spells of a wrong wall clock, "
            + "\(restores) restores of Traccar from a backup (\(replayed) positions replayed), "
            + "\(maintenance) maintenance windows (Traccar answered 503 \(answered503) times); "
            + "satellite at most \(largestDayBytes / 1000) kB a day and \(largestMonthBytes / 1000) kB a month "
            + "before its budget was spent (besides \(resentBytes / 1000) kB sent again after a crash), "
            + "then at most \(largestRestrictedDayBytes / 1000) kB a day (\(largestRestricted)); "
            + "spool at most \(largestSpoolRows) rows, \(largestSpoolBytes / 1024) KiB; log at most \(largestLogRows) rows; "
            + "RSS \(firstDayRSS >> 20) MiB after day 1, at most \(largestRSS >> 20) MiB "
            + "(every 30 days: \(monthlyRSS.map { "\($0 >> 20)" }.joined(separator: ", ")) MiB\(alone ? "" : ", shared with other suites")); "
            + "storage writes \(storage / 1024) KiB a day on average (max \((storageBytes.max() ?? 0) / 1024) KiB); "
            + "\(String(format: "%.1f", seconds)) s"
            + (problems.isEmpty ? "" : "; PROBLEMS: " + problems.prefix(5).joined(separator: "; "))
    }

    /// The daily look: the spool within its quota and retention, the log within its rows, the
    /// memory, the bytes written to storage.
    mutating func endOfDay(_ day: Int, reader: SpoolReader, settings: Spool.Settings, storage: Int64) throws {
        let status = try reader.status()
        largestSpoolRows = max(largestSpoolRows, status.rows)
        largestSpoolBytes = max(largestSpoolBytes, status.usedBytes)
        if status.usedBytes > settings.maxBytes {
            problems.append("day \(day): the spool holds \(status.usedBytes) B, over its quota")
        }
        // Retention: nothing delivered is kept much past `retainHours`, so the rows stay
        // within what the retention and the outages' backlog hold (a day is 6,600 fixes at most).
        let retainedDays = Int(settings.retainHours / 24) + 1
        if status.rows > (retainedDays + 3) * 6_700 {
            problems.append("day \(day): the spool holds \(status.rows) rows, past its retention")
        }
        // The upkeep trims the log once a tenth of its capacity came in since the last trim.
        let logRows = try reader.logEntries(limit: 100_000).count
        largestLogRows = max(largestLogRows, logRows)
        if logRows > Self.logCapacity + Self.logCapacity / 10 {
            problems.append("day \(day): the log holds \(logRows) rows, past its \(Self.logCapacity)")
        }
        let rss = Self.residentBytes()
        if day == 1 { firstDayRSS = rss }
        largestRSS = max(largestRSS, rss)
        if day % 30 == 0 { monthlyRSS.append(rss) }
        dailyRSS.append(rss)
        if day > 0 { storageBytes.append(storage) }
    }

    /// Every fix stored reached the server, at least once, each device's first arrivals in an
    /// order Traccar reads right. At least once: a restart may send again what was in flight, and
    /// a crash what the spool had not committed as delivered; the order is judged on each fix's
    /// first arrival, as Traccar's handlers see a repeat as nothing new.
    mutating func check(_ server: SimulatedServer) {
        check(server.order, at: "Traccar")
        duplicates = server.order.repeats - server.replays
        delivered = server.positions
        rounds = server.rounds
        answered503 = server.answered503
    }

    private mutating func check(_ order: DeliveryOrder.Follower, at destination: String) {
        for missing in order.missing {
            problems.append(
                "at the end, \(destination): \(missing.device): \(missing.count) fixes never arrived, the oldest \(Timestamp.iso8601(milliseconds: missing.oldest))"
            )
        }
        problems += order.problems.map { "\(destination): \($0)" }
    }

    /// The same at the push gateway, and its tokens: one a day or so, never used expired.
    mutating func check(_ gateway: SimulatedGateway) {
        check(gateway.order, at: "push")
        pushDuplicates = gateway.order.repeats
        pushDelivered = gateway.positions
        tokens = gateway.fake.tokensIssued
        expiredTokenUses = gateway.fake.expiredTokenUses
        pushBatches = gateway.fake.batches.count
        // Tokens are refreshed ahead of their expiry on the relay's schedule, across restarts and
        // clock steps: a push with an expired one is a schedule gone wrong (it costs a 401 and a
        // login on the satellite).
        if expiredTokenUses > 0 {
            problems.append("push: \(expiredTokenUses) pushes went with an expired token")
        }
        if tokens > days + restarts + 2 {
            problems.append("push: \(tokens) tokens in \(days) days and \(restarts) restarts, more than one a day")
        }
        if gateway.unreadable > 0 {
            problems.append("push: \(gateway.unreadable) points with a tracker or time unread")
        }
        if !gateway.fake.problems.isEmpty {
            problems.append("push: the gateway refused: \(gateway.fake.problems.prefix(3))")
        }
    }

    /// Every alarm reached the server in the first step the link was up once it was stored, or
    /// the next (a probe's backoff may end within it), spent budget or not.
    mutating func check(alarms stored: [Int64: Int], linkUpInStep: [Bool], at server: SimulatedServer) {
        alarms = stored.count
        let arrivals = server.alarmArrivals
        for (fixMs, step) in stored.sorted(by: { $0.key < $1.key }) {
            let due = linkUpInStep.indices.first { $0 >= step && linkUpInStep[$0] } ?? linkUpInStep.count
            guard let arrived = arrivals[fixMs] else {
                problems.append("the alarm of \(Timestamp.iso8601(milliseconds: fixMs)) never arrived")
                continue
            }
            latestAlarmSteps = max(latestAlarmSteps, arrived - due)
            if arrived > due + 1 {
                problems.append(
                    "the alarm of \(Timestamp.iso8601(milliseconds: fixMs)) arrived \(arrived - due) steps after the link was up"
                )
            }
        }
    }

    /// Bounded memory: what the spool's caches, the ledger and the writer hold levels off (in
    /// the first months, as the spool and its caches reach their working size) and does not
    /// grow with the days after: the second half's peak within a tenth and 16 MiB of the first
    /// half's. Judged only when the voyage has the process to itself (`make simulate`) and runs
    /// two months or more: in `make test` other suites' memory comes and goes beside it.
    mutating func checkMemory() {
        guard alone, dailyRSS.count >= 60 else { return }
        let half = dailyRSS.count / 2
        let (first, second) = (dailyRSS[..<half].max() ?? 0, dailyRSS[half...].max() ?? 0)
        if second > first + first / 10 + 16 << 20 {
            problems.append(
                "resident memory grew: at most \(first >> 20) MiB in the first \(half) days, \(second >> 20) MiB after")
        }
    }

    /// By the interface's count (the simulated link's, not the relay's): what the satellite
    /// carried before its budget was spent stays within the budget + 2 %, each day and month the
    /// relay's clock names.
    mutating func checkBudgets(_ carried: [String: SimulatedServer.Carried]) {
        guard let budget = SimulatedUplinks(days: days).satellite.budget else { return }
        for (period, bytes) in carried.sorted(by: { $0.key < $1.key }) {
            let day = period.count == 10
            guard let limit = day ? budget.dayBytes : budget.monthBytes else { continue }
            // What a crash made the relay send twice is the at-least-once promise's price, not
            // an overspend: its record of the first sending died with it.
            let before = bytes.all - bytes.restricted - bytes.again
            resentBytes = max(resentBytes, bytes.again)
            if day {
                largestDayBytes = max(largestDayBytes, before)
                if bytes.restricted > largestRestrictedDayBytes {
                    largestRestrictedDayBytes = bytes.restricted
                    largestRestricted = "\(period): \(bytes.restrictedPush / 1000) kB of it push's"
                }
            } else {
                largestMonthBytes = max(largestMonthBytes, before)
            }
            if before > limit + limit / 50 {
                problems.append(
                    "\(period): \(before) B on the satellite before its budget of \(limit) B was spent, over it by more than 2 %"
                )
            }
        }
    }

    /// The newest entries the log keeps (docs/operating.md, `georelay logs`).
    static let logCapacity = 10_000

    /// `VmRSS` of this process.
    static func residentBytes() -> Int64 {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return (Int64(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
        }
        return 0
    }
}

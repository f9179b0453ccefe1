import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayService

/// Each health check on injected inputs: free bytes, adjtimex's answer, fix and success ages.
@Suite(.offThePool) struct DeviceHealthTests {
    static let now: Int64 = 1_790_000_000_000 // 2026-09-21
    static let gib: Int64 = 1 << 30
    static let minute: Int64 = 60_000

    // MARK: Disk

    struct DiskCase: Sendable, CustomStringConvertible {
        var free: Int64, total: Int64, fileBytes: Int64, walBytes: Int64, expected: HealthState
        var description: String { "free \(free) of \(total), file \(fileBytes), WAL \(walBytes)" }
    }

    static let mib: Int64 = 1 << 20
    static let diskCases: [DiskCase] = [
        DiskCase(free: 50 * gib, total: 100 * gib, fileBytes: mib, walBytes: 0, expected: .ok),
        // Less free than the quota (1 GiB) plus the WAL limit (16 MiB) still needs: the disk fills first.
        DiskCase(free: 900 * mib, total: 100 * gib, fileBytes: mib, walBytes: 0, expected: .failing),
        // The spool already holds most of its quota: what is free covers the rest.
        DiskCase(free: 900 * mib, total: 8 * gib, fileBytes: 1000 * mib, walBytes: 0, expected: .ok),
        // Enough for the quota, but under a tenth of the filesystem.
        DiskCase(free: 5 * gib, total: 100 * gib, fileBytes: mib, walBytes: 0, expected: .degraded),
        // A WAL three times its 16 MiB limit: checkpoints held back.
        DiskCase(free: 50 * gib, total: 100 * gib, fileBytes: mib, walBytes: 48 * mib, expected: .degraded),
    ]

    @Test(arguments: diskCases)
    func disk(_ c: DiskCase) {
        let check = HealthChecks.disk(
            space: .success(DiskSpace(availableBytes: c.free, totalBytes: c.total)), fileBytes: c.fileBytes,
            walBytes: c.walBytes, maxBytes: Self.gib)
        #expect(check.state == c.expected, "\(check.summary)")
    }

    @Test func diskThatCannotBeMeasuredIsDegradedAndSaysWhy() {
        let check = HealthChecks.disk(
            space: .failure(DiskSpaceError(message: "statvfs /x: No such file or directory")), fileBytes: 0,
            walBytes: 0, maxBytes: Self.gib)
        #expect(check.state == .degraded)
        #expect(check.summary.contains("statvfs /x"))
    }

    @Test func walLimitFollowsTheWriter() {
        #expect(HealthChecks.walLimitBytes(maxBytes: 1 << 20) == 256 << 10)
        #expect(HealthChecks.walLimitBytes(maxBytes: 64 << 20) == 8 << 20)
        #expect(HealthChecks.walLimitBytes(maxBytes: 1 << 30) == 16 << 20)
    }

    // MARK: Clock

    @Test(arguments: [
        // sync, newest fix relative to now (nil: none), expected
        (ClockSync.synchronised(maxErrorMs: 5), Int64?(-2000), HealthState.ok),
        (.unsynchronised(maxErrorMs: 16_000), Int64?.none, .ok),
        // A backlog's old fix says nothing about the clock.
        (.unsynchronised(maxErrorMs: 16_000), Int64?(-120 * 24 * 60 * minute), .ok),
        // Fixes 20 min ahead of an unsynchronised clock: the clock is behind.
        (.unsynchronised(maxErrorMs: 16_000), Int64?(20 * minute), .failing),
        (.unknown("adjtimex: Operation not permitted"), Int64?(20 * minute), .failing),
        // Ahead of a synchronised clock: a receiver (or the time source) is wrong.
        (.synchronised(maxErrorMs: 5), Int64?(20 * minute), .degraded),
        (.unsynchronised(maxErrorMs: 16_000), Int64?(5 * minute), .ok),
    ])
    func clock(sync: ClockSync, fixOffset: Int64?, expected: HealthState) {
        let check = HealthChecks.clock(
            sync: sync, nowMs: Self.now, newestFixMs: fixOffset.map { Self.now + $0 }, jump: nil)
        #expect(check.state == expected, "\(check.summary)")
    }

    @Test func clockNeverSetIsFailingAndAJumpIsShown() {
        let unset = HealthChecks.clock(
            sync: .unsynchronised(maxErrorMs: 16_000), nowMs: 86_400_000, newestFixMs: nil, jump: nil)
        #expect(unset.state == .failing)
        #expect(unset.summary.contains("before 2025"))
        let jumped = HealthChecks.clock(
            sync: .synchronised(maxErrorMs: 5), nowMs: Self.now, newestFixMs: nil,
            jump: ClockJump(byMs: 3 * 3_600_000, atMs: Self.now - Self.minute))
        #expect(jumped.state == .ok)
        #expect(jumped.summary.contains("jumped by +3 h at "), "\(jumped.summary)")
    }

    @Test func clockStepsAreNoticedAndSlewsAreNot() {
        let detector = ClockJumpDetector()
        #expect(detector.observe(wallMs: 1_000_000, monotonicMs: 500) == nil)
        // A second on both clocks, then a second with a millisecond of slew: no jump.
        #expect(detector.observe(wallMs: 1_001_000, monotonicMs: 1500) == nil)
        #expect(detector.observe(wallMs: 1_002_001, monotonicMs: 2500) == nil)
        // The wall clock stepped back an hour within one second.
        let back = detector.observe(wallMs: 1_003_001 - 3_600_000, monotonicMs: 3500)
        #expect(back == ClockJump(byMs: -3_600_000, atMs: 1_003_001 - 3_600_000))
        // Kept after further ordinary seconds.
        #expect(detector.observe(wallMs: 1_004_001 - 3_600_000, monotonicMs: 4500) == back)
    }

    @Test func healthFileCarriesTheClockJump() throws {
        let path = "/tmp/georelay-health-\(getpid())-\(Self.now)"
        defer { unlink(path + ".health") }
        let file = HealthFile(socketPath: path)
        let report = HealthReport(
            parts: [HealthReport.Part(key: "ingest", name: "ingest loop", lastTurnMs: 10)], stallAfterMs: 30_000,
            atMs: 20,
            clockJump: ClockJump(byMs: 7200, atMs: Self.now))
        try file.write(report)
        #expect(file.read()?.report == report)
    }

    // MARK: Sources

    static let rolloverMs = WeekRollover.periodMs

    @Test func rolledOverReceiverIsNamedWhileItsNewestFixIsRolledOver() {
        let rolled = ReceiverRecord(
            name: "gps-old", lastFixMs: Self.now - Self.rolloverMs, lastReceivedMs: Self.now - 1000,
            newestFixMs: Self.now - Self.rolloverMs, newestReceivedMs: Self.now - 1000, rolloverFixes: 12)
        let check = HealthChecks.sources([rolled], nowMs: Self.now)
        #expect(check.state == .degraded)
        #expect(check.summary.contains("gps-old dates its fixes 1024 weeks back"), "\(check.summary)")
        #expect(check.summary.contains("12 fixes so far"))
        // Fixed since: its newest fix is current; the past ones are still named.
        var fixed = rolled
        fixed.newestFixMs = Self.now - 2000
        fixed.lastFixMs = Self.now - 2000
        let after = HealthChecks.sources([fixed], nowMs: Self.now)
        #expect(after.state == .ok)
        #expect(after.summary.contains("gps-old: 12 fixes dated 1024 weeks back, none lately"), "\(after.summary)")
    }

    @Test(arguments: [
        // last stored position's age (nil: never), expected
        (Int64?.none, HealthState.degraded),
        (Int64?(30 * minute), .degraded),
        (Int64?(1 * minute), .ok),
    ])
    func untimedReceiver(lastReceivedAge: Int64?, expected: HealthState) {
        let receiver = ReceiverRecord(
            name: "gpsd0", lastFixMs: lastReceivedAge.map { Self.now - $0 },
            lastReceivedMs: lastReceivedAge.map { Self.now - $0 },
            untimedFixes: 40)
        let check = HealthChecks.sources([receiver], nowMs: Self.now)
        #expect(check.state == expected, "\(check.summary)")
        #expect(check.summary.contains("gpsd0"))
        #expect(check.summary.contains("40 fixes without a time"))
    }

    @Test func rolloverWindowIsAWeekEitherSide() {
        #expect(WeekRollover.isRolledOver(fixMs: Self.now - Self.rolloverMs, receivedMs: Self.now))
        #expect(WeekRollover.isRolledOver(fixMs: Self.now - Self.rolloverMs - 6 * 86_400_000, receivedMs: Self.now))
        #expect(!WeekRollover.isRolledOver(fixMs: Self.now - Self.rolloverMs + 8 * 86_400_000, receivedMs: Self.now))
        #expect(!WeekRollover.isRolledOver(fixMs: Self.now - 1000, receivedMs: Self.now))
    }

    // MARK: Links

    static func destination(_ state: String, pending: Int, lastSuccessAgo: Int64?) -> SpoolStatus.Destination {
        var d = SpoolStatus.Destination.notStarted(name: "traccar", buffered: true)
        d.state = state
        d.pending = pending
        d.lastSuccessMs = lastSuccessAgo.map { now - $0 }
        // A year-old backlog throughout: fix times say nothing about how long a link has been down.
        d.oldestPendingFixMs = now - 365 * 86_400_000
        d.lastError = "HTTP 502"
        return d
    }

    struct LinkCase: Sendable, CustomStringConvertible {
        var destination: SpoolStatus.Destination
        /// How long ago the oldest waiting position arrived.
        var waitingFor: Int64?
        var expected: HealthState
        var description: String {
            "\(destination.state), \(destination.pending) waiting, success \(destination.lastSuccessMs.map { "\($0)" } ?? "never"), waiting \(waitingFor.map { "\($0)" } ?? "-")"
        }
    }

    static let linkCases: [LinkCase] = [
        LinkCase(destination: destination("online", pending: 3, lastSuccessAgo: 1000), expected: .ok),
        LinkCase(destination: destination("backoff", pending: 0, lastSuccessAgo: 2 * 3_600_000), expected: .ok),
        LinkCase(destination: destination("backoff", pending: 5, lastSuccessAgo: 5 * minute), expected: .degraded),
        LinkCase(destination: destination("probing", pending: 5, lastSuccessAgo: 2 * 3_600_000), expected: .failing),
        // Never delivered: how long the oldest waiting position has been there decides.
        LinkCase(
            destination: destination("backoff", pending: 5, lastSuccessAgo: nil), waitingFor: 5 * minute,
            expected: .degraded),
        LinkCase(
            destination: destination("backoff", pending: 5, lastSuccessAgo: nil), waitingFor: 3 * 3_600_000,
            expected: .failing),
        LinkCase(destination: destination("backoff", pending: 5, lastSuccessAgo: nil), expected: .degraded),
        LinkCase(destination: destination("auth-failed", pending: 0, lastSuccessAgo: 1000), expected: .failing),
    ]

    @Test(arguments: linkCases)
    func links(_ c: LinkCase) {
        let check = HealthChecks.links(
            [c.destination], waitingSinceMs: c.waitingFor.map { ["traccar": Self.now - $0] } ?? [:], running: true,
            nowMs: Self.now)
        #expect(check.state == c.expected, "\(check.summary)")
        if c.expected != .ok {
            #expect(check.summary.hasPrefix("traccar: ") && check.summary.contains("HTTP 502"), "\(check.summary)")
        }
    }

    @Test func linksAreNotJudgedWithTheRelayDown() {
        let check = HealthChecks.links(
            [Self.destination("backoff", pending: 5, lastSuccessAgo: 5 * 3_600_000)], running: false, nowMs: Self.now)
        #expect(check.state == .ok)
    }

    // MARK: The whole

    @Test func theBoxIsAsBadAsItsWorstCheckAndExitsAccordingly() {
        let stalled = HealthReport(
            parts: [HealthReport.Part(key: "writer", name: "spool writer", lastTurnMs: 0)], stallAfterMs: 2000,
            atMs: 5000)
        let loops = HealthChecks.loops(running: true, health: .known(stalled))
        #expect(loops.state == .failing)
        #expect(loops.summary.hasPrefix("spool writer stalled: no turn for 5 s"))
        #expect(HealthChecks.loops(running: false, health: .unknown("the relay is not running")).state == .failing)
        #expect(HealthChecks.loops(running: true, health: .unknown("no readable file")).state == .degraded)

        let ok = HealthCheck(key: "disk", state: .ok, summary: "plenty")
        let degraded = HealthCheck(key: "links", state: .degraded, summary: "traccar: backoff")
        #expect(DeviceHealth(checks: [ok]).exitCode == .success)
        #expect(DeviceHealth(checks: [ok]).healthz == (200, "ok\n"))
        let one = DeviceHealth(checks: [ok, degraded])
        #expect(one.state == .degraded)
        #expect(one.exitCode.rawValue == 1)
        #expect(one.healthz == (200, "degraded: links: traccar: backoff\n"))
        let two = DeviceHealth(checks: [ok, degraded, loops])
        #expect(two.exitCode.rawValue == 2)
        #expect(two.reasons.first?.hasPrefix("loops: spool writer stalled") == true)
        #expect(two.healthz.status == 503 && two.healthz.body.hasPrefix("spool writer stalled: "))
    }

    @Test func spoolCheck() {
        #expect(HealthChecks.spool(readError: nil, problems: nil).state == .ok)
        #expect(HealthChecks.spool(readError: nil, problems: []).state == .ok)
        let broken = HealthChecks.spool(
            readError: nil, problems: ["*** in database main ***\nPage 7: btreeInitPage() returns error code 11"])
        #expect(broken.state == .failing)
        #expect(broken.summary.hasPrefix("quick_check found a problem: "))
        #expect(
            HealthChecks.spool(readError: "no spool at /x", problems: nil).summary == "spool unreadable: no spool at /x"
        )
    }
}

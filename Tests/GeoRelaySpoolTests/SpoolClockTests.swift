import GeoRelayCore
import GeoRelayTestTraits
import Synchronization
import Testing

@testable import GeoRelaySpool

/// The spool's time is the clock it is handed (issue 37): retention and the day a byte is billed
/// to follow it, so a simulation can run a spool through months without waiting.
@Suite(.offThePool) struct SpoolClockTests {
    /// 2026-12-05T23:00:00Z.
    static let lateEvening: Int64 = 1_796_511_600_000

    /// A spool on a clock of its own that keeps delivered positions 24 hours, with destination
    /// `d`; the fixture owns its directory, so the caller keeps it for as long as the spool.
    func retainingADay() async throws -> (SpoolFixture, Spool, SimulatedClock) {
        let fixture = SpoolFixture()
        let clock = SimulatedClock(wallMs: Self.lateEvening)
        fixture.settings.clock = clock
        fixture.settings.retainHours = 24
        let spool = try fixture.open()
        try await spool.register(destinations: [DestinationRegistration(name: "d", buffered: true)])
        return (fixture, spool, clock)
    }

    @Test func retentionCountsOnTheSpoolsClock() async throws {
        let (fixture, spool, clock) = try await retainingADay()
        defer {
            spool.close()
            withExtendedLifetime(fixture) {}
        }
        _ = await spool.append([fix("a", 0), fix("a", 1)])
        var update = DeliveryUpdate(destination: "d")
        update.acknowledged = [(1, 2)]
        spool.record(update)
        _ = await spool.append([])
        clock.advance(by: .seconds(23 * 3600))
        #expect(try spool.deleteExpired() == 0, "delivered 23 hours ago on the spool's clock: kept")
        clock.advance(by: .seconds(2 * 3600))
        #expect(try spool.deleteExpired() == 2, "delivered 25 hours ago on the spool's clock: gone")
    }

    /// Positions queued for a replay (a server restored from a backup) stay until they are sent
    /// again, however long the link is down: retention only takes what nobody asked for. (The
    /// voyage simulation lost a replay's positions to retention during an outage after it.)
    @Test func retentionKeepsWhatAReplayStillHasToSend() async throws {
        let (fixture, spool, clock) = try await retainingADay()
        defer {
            spool.close()
            withExtendedLifetime(fixture) {}
        }
        let seqs = await spool.append([fix("a", 0), fix("a", 1), fix("a", 2)]).compactMap(\.seq)
        var update = DeliveryUpdate(destination: "d")
        update.acknowledged = [(1, seqs[2])]
        spool.record(update)
        #expect(try await spool.queueReplay(destination: "d", seqs: [seqs[1], seqs[2]]) == 2)
        clock.advance(by: .seconds(25 * 3600))
        #expect(try spool.deleteExpired() == 1, "only the position no replay waits for is gone")
        let queued = try spool.makeReader().replayQueue(destination: "d", limit: 10).map(\.seq)
        #expect(queued == [seqs[1], seqs[2]], "the replay still has both to send")
    }

    @Test func bytesAreBilledToTheDayOfTheSpoolsClock() async throws {
        let fixture = SpoolFixture()
        let clock = SimulatedClock(wallMs: Self.lateEvening + 3_540_000) // 23:59
        fixture.settings.clock = clock
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "d", buffered: true)])
        var before = DeliveryUpdate(destination: "d")
        before.wireBytes = 700
        spool.record(before)
        _ = await spool.append([])
        clock.advance(by: .seconds(120)) // 00:01 the next day
        var after = DeliveryUpdate(destination: "d")
        after.wireBytes = 300
        spool.record(after)
        _ = await spool.append([])
        let status = try #require(try spool.makeReader().status().destinations.first)
        #expect(status.wireBytesToday == 300, "the new day's bytes alone")
        #expect(status.wireBytes == 1000)
    }

    /// A position waiting for its company (`CommitWindow`) is committed when the spool's clock
    /// reaches the window's end: the writer sleeps on that clock, so a simulation's spool commits
    /// as its time moves, and not before.
    @Test func theCommitWindowEndsOnTheSpoolsClock() async throws {
        let fixture = SpoolFixture()
        let clock = SimulatedClock(wallMs: Self.lateEvening)
        fixture.settings.clock = clock
        fixture.settings.commitWindow = .seconds(2)
        let spool = try fixture.open()
        defer { spool.close() }
        // Both heard from: the company of the next group.
        #expect(await spool.append([fix("a", 0), fix("b", 0)]).count == 2)
        let committed = Atomic<Bool>(false)
        let waiting = Task {
            let results = await spool.append([fix("a", 1)])
            committed.store(true, ordering: .releasing)
            return results
        }
        // Bounded: the writer asleep on the clock within ten seconds of real time.
        for _ in 0..<1000 where clock.sleeping < 1 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(clock.sleeping == 1, "the writer does not wait for the window's end on the spool's clock")
        clock.advance(by: .milliseconds(1999))
        // A tenth of a second of real time, enough for a commit that was due to be answered.
        try await Task.sleep(for: .milliseconds(100))
        let early = committed.load(ordering: .acquiring)
        #expect(!early, "committed before the window's end on the spool's clock")
        clock.advance(by: .milliseconds(1))
        #expect(await waiting.value == [.stored(seq: 3)])
    }
}

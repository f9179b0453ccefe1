import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// The commit window on an injected clock: a group waits only for its company, and never longer
/// than the window.
@Suite(.offThePool) struct CommitWindowTests {
    let ms: UInt64 = 1_000_000

    @Test func fourUnitsAtOneHertzCommitOncePerRoundWithoutWaitingTheWholeWindow() {
        var window = CommitWindow(lengthNs: 900 * ms)
        let units = ["a", "b", "c", "d"]
        // The first round: "a" is heard first and commits alone; the group "b" opens waits for
        // "a" (heard 250 ms before) and takes c and d with it.
        do {
            let commit = window.append(devices: ["a"], count: 1, alarm: false, nowNs: 0)
            #expect(commit)
        }
        window.close()
        for (i, unit) in units.enumerated().dropFirst() {
            do {
                let commit = window.append(devices: [unit], count: 1, alarm: false, nowNs: UInt64(i) * 250 * ms)
                #expect(!commit)
            }
        }
        do {
            let commit = window.append(devices: ["a"], count: 1, alarm: false, nowNs: 1000 * ms)
            #expect(commit, "b's group commits with a's next fix")
        }
        window.close()
        // From then on each group, opened by whoever comes first, waits for the other three.
        for round in 1...3 {
            let start = UInt64(round) * 1000 * ms + 250 * ms
            for (i, unit) in ["b", "c", "d", "a"].enumerated() {
                let now = start + UInt64(i) * 250 * ms
                let commit = window.append(devices: [unit], count: 1, alarm: false, nowNs: now)
                #expect(commit == (unit == "a"), "round \(round): \(unit) at \(now / ms) ms")
                #expect(window.deadlineNs == start + 900 * ms)
                #expect(window.isDue(nowNs: now) == (unit == "a"))
            }
            window.close()
        }
    }

    @Test func aUnitAloneNeverWaits() {
        var window = CommitWindow(lengthNs: 900 * ms)
        for i in 0..<10 {
            do {
                let commit = window.append(devices: ["phone"], count: 1, alarm: false, nowNs: UInt64(i) * 20 * ms)
                #expect(commit, "a phone uploading its backlog")
            }
            window.close()
        }
    }

    @Test func aUnitThatFellSilentIsNoLongerWaitedFor() {
        var window = CommitWindow(lengthNs: 900 * ms)
        _ = window.append(devices: ["a"], count: 1, alarm: false, nowNs: 0)
        _ = window.append(devices: ["b"], count: 1, alarm: false, nowNs: 100 * ms)
        window.close()
        // b has been quiet for more than a window: a commits alone again.
        do {
            let commit = window.append(devices: ["a"], count: 1, alarm: false, nowNs: 1_100 * ms)
            #expect(commit)
        }
    }

    @Test func theWindowEndsAtItsDeadlineWhenTheCompanyDoesNotCome() {
        var window = CommitWindow(lengthNs: 900 * ms)
        _ = window.append(devices: ["a"], count: 1, alarm: false, nowNs: 0)
        _ = window.append(devices: ["b"], count: 1, alarm: false, nowNs: 100 * ms)
        window.close()
        do {
            let commit = window.append(devices: ["a"], count: 1, alarm: false, nowNs: 500 * ms)
            #expect(!commit)
        }
        #expect(!window.isDue(nowNs: 1_399 * ms))
        #expect(window.isDue(nowNs: 1_400 * ms))
    }

    @Test func alarmsAndFullGroupsCommitAtOnce() {
        var window = CommitWindow(lengthNs: 900 * ms)
        _ = window.append(devices: ["a"], count: 1, alarm: false, nowNs: 0)
        _ = window.append(devices: ["b"], count: 1, alarm: false, nowNs: 100 * ms)
        window.close()
        do {
            let commit = window.append(devices: ["a"], count: 1, alarm: true, nowNs: 500 * ms)
            #expect(commit, "an SOS does not wait for company")
        }
        window.close()
        do {
            let commit = window.append(devices: ["a"], count: 10, alarm: false, nowNs: 600 * ms)
            #expect(!commit)
        }
        do {
            let commit = window.append(devices: ["a"], count: CommitWindow.maxPositions, alarm: false, nowNs: 601 * ms)
            #expect(commit)
        }
    }

    @Test func aZeroWindowCommitsEveryGroupAtOnce() {
        var window = CommitWindow(lengthNs: 0)
        _ = window.append(devices: ["b"], count: 1, alarm: false, nowNs: 0)
        do {
            let commit = window.append(devices: ["a"], count: 1, alarm: false, nowNs: 1)
            #expect(commit)
        }
    }
}

/// The writer with a window and held state: `ok` still means committed, acknowledgements wait in
/// memory until their interval, a barrier or the close, and nothing answered is lost.
@Suite(.offThePool) struct HeldStateTests {
    @Test func positionsCommitInTheirWindowAndAcknowledgementsWaitForTheInterval() async throws {
        let fixture = SpoolFixture()
        fixture.settings.commitWindow = .milliseconds(300)
        fixture.settings.stateInterval = .seconds(60)
        let spool = try fixture.open()
        try await spool.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        let stored = await spool.append([fix("a", 1)])
        guard case .stored(let seq)? = stored.first else {
            Issue.record("not stored: \(stored)")
            return
        }
        // Committed before answered: a second connection sees it.
        #expect(try SpoolReader.open(path: fixture.settings.path).status().rows == 1)
        var update = DeliveryUpdate(destination: "traccar")
        update.acknowledged = [(1, seq)]
        update.sent = 1
        spool.record(update)
        spool.add(counters: ["ingest.rejected.parse": 1])
        // A later position's commit does not carry the held acknowledgement.
        _ = await spool.append([fix("a", 2)])
        let held = try SpoolReader.open(path: fixture.settings.path).status()
        #expect(held.destinations.first?.pending == 2, "the acknowledgement is still held")
        // A barrier writes it.
        await spool.flush()
        let flushed = try SpoolReader.open(path: fixture.settings.path).status()
        #expect(flushed.destinations.first?.pending == 1)
        #expect(flushed.destinations.first?.sent == 1)
        spool.close()
    }

    @Test func closingWritesHeldStateAndCounters() async throws {
        let fixture = SpoolFixture()
        fixture.settings.commitWindow = .milliseconds(300)
        fixture.settings.stateInterval = .seconds(60)
        let spool = try fixture.open()
        try await spool.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        _ = await spool.append([fix("a", 1), fix("a", 2)])
        spool.add(counters: ["ingest.rejected.parse": 3])
        spool.close()
        let status = try SpoolReader.open(path: fixture.settings.path).status()
        #expect(status.counters["ingest.accepted"] == 2)
        #expect(status.counters["ingest.rejected.parse"] == 3)
    }

    /// Gauges are set, not added: the newest held one is written, beside counters that add up,
    /// and a later group's value replaces what the table holds.
    @Test func gaugesAreSetAndTheNewestWins() async throws {
        let fixture = SpoolFixture()
        fixture.settings.stateInterval = .seconds(60)
        let spool = try fixture.open()
        spool.set(gauges: ["sbd.signal": 2])
        spool.add(counters: ["sbd.failures": 1])
        spool.set(gauges: ["sbd.signal": 5, "sbd.service": 1])
        spool.add(counters: ["sbd.failures": 1])
        await spool.flush()
        let first = try SpoolReader.open(path: fixture.settings.path).status().counters
        #expect(first["sbd.signal"] == 5 && first["sbd.service"] == 1 && first["sbd.failures"] == 2, "\(first)")
        spool.set(gauges: ["sbd.signal": 0])
        spool.close()
        let second = try SpoolReader.open(path: fixture.settings.path).status().counters
        #expect(second["sbd.signal"] == 0 && second["sbd.service"] == 1 && second["sbd.failures"] == 2, "\(second)")
    }

    @Test func heldStateIsWrittenWhenItsIntervalIsUp() async throws {
        let fixture = SpoolFixture()
        fixture.settings.stateInterval = .milliseconds(200)
        let spool = try fixture.open()
        defer { spool.close() }
        spool.add(counters: ["ingest.rejected.parse": 1])
        let deadline = ContinuousClock.now + .seconds(10)
        while (try? SpoolReader.open(path: fixture.settings.path).status().counters["ingest.rejected.parse"]) != 1 {
            #expect(ContinuousClock.now < deadline, "waited 10 s for a counter held for 200 ms to be written")
            if ContinuousClock.now >= deadline { return }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}

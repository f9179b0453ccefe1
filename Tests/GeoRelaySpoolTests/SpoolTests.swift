import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// A spool in its own temporary directory.
final class SpoolFixture {
    let directory: String
    var settings: Spool.Settings

    init(maxBytes: Int64 = 1 << 30, whenFull: Configuration.WhenFull = .dropOldest) {
        var template = Array("/tmp/grs.XXXXXX".utf8CString)
        directory = String(cString: template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!)! })
        settings = Spool.Settings(path: directory + "/spool/georelay.db")
        settings.maxBytes = maxBytes
        settings.whenFull = whenFull
    }

    func open() throws -> Spool { try Spool(settings: settings) }

    deinit { try? FileManager.default.removeItem(atPath: directory) }
}

func fix(_ device: String, _ second: Int64, lat: Double = 59, lon: Double = 10) -> Position {
    Position(device: device, timeMs: 1_784_953_800_000 + second * 1000, lat: lat, lon: lon, speed: 1.5)
}

/// Writes 20,000 positions of one device, 500 per append, with nothing delivered.
func fill(_ spool: Spool) async -> [AppendResult] {
    try? await spool.register(destinations: [DestinationRegistration(name: "down", buffered: true)])
    var results: [AppendResult] = []
    for batch in 0..<40 {
        results += await spool.append((0..<500).map { fix("a", Int64(batch * 500 + $0)) })
    }
    return results
}

@Suite(.offThePool) struct SQLiteBindingTests {
    /// A bind SQLite refuses is not a silent NULL: the statement's next step throws it.
    @Test func aRefusedBindFailsTheStepInsteadOfRunningWithANull() throws {
        let fixture = SpoolFixture()
        let db = try SQLiteDatabase(path: fixture.directory + "/b.db")
        try db.execute("CREATE TABLE t(a INTEGER NOT NULL DEFAULT 7)")
        let insert = try db.statement("INSERT INTO t(a) VALUES(coalesce(?, 7))")
        insert.reset()
        insert.bind(2, Int64(1))
        #expect(throws: SQLiteError.self) { try insert.run() }
        insert.reset()
        insert.bind(1, Int64(3))
        try insert.run()
        let count = try db.statement("SELECT count(*), max(a) FROM t")
        _ = try count.step()
        #expect(count.int64(0) == 1 && count.int64(1) == 3, "only the well-bound insert ran")
    }
}

@Suite(.offThePool) struct SpoolTests {
    @Test func opensInWALWithFullSyncAndPrivateFile() throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        let pragmas = try spool.withWriterConnection { db in
            [try db.pragma("journal_mode"), try db.pragma("synchronous"), try db.pragma("user_version")]
        }
        #expect(pragmas == ["wal", "2", "\(Schema.currentVersion)"])
        let attributes = try FileManager.default.attributesOfItem(atPath: fixture.settings.path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
    }

    @Test func appendIsIdempotentPerDeviceAndFixTime() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        let first = await spool.append([fix("a", 0), fix("a", 1), fix("b", 0)])
        #expect(first == [.stored(seq: 1), .stored(seq: 2), .stored(seq: 3)])
        let again = await spool.append([fix("a", 1), fix("a", 0, lat: 60), fix("a", 2), fix("a", 2)])
        #expect(again == [.duplicate(seq: 2), .conflict(seq: 1), .stored(seq: 4), .duplicate(seq: 4)])
        let reader = try spool.makeReader()
        let status = try reader.status()
        #expect(status.rows == 4)
        #expect(status.counters["ingest.accepted"] == 4)
        #expect(status.counters["ingest.duplicates"] == 2)
        #expect(status.counters["ingest.conflicts"] == 1)
        let stored = try reader.positions(deviceID: 1, device: "a", after: 0, limit: 10)
        #expect(stored.map(\.position.lat) == [59, 59, 59])
    }

    @Test func positionsRoundTripWithEveryField() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        let full = Position(
            device: "x", timeMs: 1_784_953_800_123, lat: -33.5, lon: 151.25, speed: 2, course: 359.5, altitude: -3,
            accuracy: 4.5, battery: 12, charging: false, alarm: "sos",
            attributes: [Attribute("k", .string("v")), Attribute("n", .number(1.5)), Attribute("b", .bool(true))])
        _ = await spool.append([full, Position(device: "x", timeMs: 1_784_953_801_000, lat: 0, lon: 0)])
        let rows = try spool.makeReader().positions(after: 0, limit: 10)
        // Each comes back with its odometer: 1 m at the device's first fix (`Odometer.start`), then
        // the great circle from Sydney's latitude to 0°, 0° (15,231 km) on top, in whole metres.
        var expected = [full, Position(device: "x", timeMs: 1_784_953_801_000, lat: 0, lon: 0)]
        expected[0].odometer = 1
        expected[1].odometer = (1 + Geo.distance(lat1: -33.5, lon1: 151.25, lat2: 0, lon2: 0)).rounded()
        #expect(rows.map(\.position) == expected)
    }

    @Test func survivesReopenAndKeepsSeqsIncreasing() async throws {
        let fixture = SpoolFixture()
        do {
            let spool = try fixture.open()
            _ = await spool.append([fix("a", 0), fix("a", 1)])
            spool.close()
        }
        let spool = try fixture.open()
        defer { spool.close() }
        #expect(await spool.append([fix("a", 1), fix("a", 2)]) == [.duplicate(seq: 2), .stored(seq: 3)])
    }

    @Test func destinationsTrackTheirOwnCursors() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        _ = await spool.append([fix("old", 0)])
        try await spool.register(destinations: [DestinationRegistration(name: "one", buffered: true)])
        _ = await spool.append([fix("a", 0), fix("a", 1), fix("b", 0)])
        try await spool.register(destinations: [
            DestinationRegistration(name: "one", buffered: true), DestinationRegistration(name: "two", buffered: true),
        ])
        _ = await spool.append([fix("a", 2)])
        let reader = try spool.makeReader()
        // "one" sees everything after it was added; "two" only what came after it.
        #expect(try reader.pendingDevices(destination: "one").map(\.device) == ["a", "b"])
        #expect(try reader.pendingDevices(destination: "two").map(\.device) == ["a"])
        #expect(try reader.pendingDevices(destination: "two")[0].ackedSeq == 4)

        var update = DeliveryUpdate(destination: "one")
        update.acknowledged = [(2, 3)]
        update.quarantined = [(3, 4, "HTTP 413")]
        update.sent = 2
        spool.record(update)
        _ = await spool.append([]) // a barrier: the update is committed in an earlier or the same group
        let status = try reader.status()
        let one = try #require(status.destinations.first { $0.name == "one" })
        #expect(one.pending == 1) // a's seq 5
        #expect(one.quarantined == 1)
        #expect(one.sent == 2)
        // A quarantine decided before the cursor reaches it (a plan found the position unsendable)
        // is recorded, but the cursor does not move: what lies before it is still owed.
        var unreached = DeliveryUpdate(destination: "one")
        unreached.quarantinedUnreached = [(5, "not sent: refused ahead")]
        spool.record(unreached)
        _ = await spool.append([])
        let after = try #require(try reader.status().destinations.first { $0.name == "one" })
        #expect(
            after.pending == 1 && after.quarantined == 2, "pending \(after.pending), quarantined \(after.quarantined)")
        let two = try #require(status.destinations.first { $0.name == "two" })
        #expect(two.pending == 1)

        // Removing a destination drops its state only.
        try await spool.register(destinations: [DestinationRegistration(name: "two", buffered: true)])
        #expect(try reader.status().destinations.map(\.name) == ["two"])
    }

    /// A drain's progress (and its end) is committed within about a second whatever the state
    /// interval (here a minute), so a crash mid-drain resends a moment's worth; the steady
    /// state's stays held for the interval (flash wear).
    @Test func aDrainsProgressIsCommittedSoonWhileTheSteadyStateIsHeld() async throws {
        let fixture = SpoolFixture()
        fixture.settings.stateInterval = .seconds(60)
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "one", buffered: true)])
        _ = await spool.append((0..<20).map { fix("a", Int64($0)) } + [fix("b", 0), fix("b", 1), fix("c", 0)])
        let reader = try spool.makeReader()
        let cursors = try reader.pendingDevices(destination: "one")
        let (a, b) = (
            try #require(cursors.first { $0.device == "a" }), try #require(cursors.first { $0.device == "b" })
        )
        let c = try #require(cursors.first { $0.device == "c" })
        var steady = DeliveryUpdate(destination: "one")
        steady.acknowledged = [(b.deviceID, b.ackedSeq + 1)]
        spool.record(steady)
        var drain = DeliveryUpdate(destination: "one")
        drain.acknowledged = [(a.deviceID, a.lastSeq)]
        drain.drain = true
        spool.record(drain)
        // Both go in the drain's commit (held state is written as one); the steady state alone waits.
        #expect(
            waitUntil("the drain's acknowledgement committed") {
                (try? reader.pendingDevices(destination: "one").contains { $0.device == "a" }) == false
            })
        // The round after a drain ends it (its last few positions, or the live fix): as prompt, so
        // `status` shows the backlog drained within a second, not an interval later.
        var end = DeliveryUpdate(destination: "one")
        end.acknowledged = [(c.deviceID, c.lastSeq)]
        spool.record(end)
        #expect(
            waitUntil("the drain's end committed") {
                (try? reader.pendingDevices(destination: "one").contains { $0.device == "c" }) == false
            })
        var later = DeliveryUpdate(destination: "one")
        later.acknowledged = [(b.deviceID, b.lastSeq)]
        spool.record(later)
        _ = await spool.append([fix("c", 0)]) // a group commits; the held steady state does not go with it
        #expect(
            try reader.pendingDevices(destination: "one").contains { $0.device == "b" },
            "the steady state's acknowledgement is held")
    }

    /// What a reload relies on: the new forwarders read cursors past every acknowledgement the old ones recorded.
    @Test func flushReturnsOnceEverythingRecordedBeforeItIsCommitted() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        try await spool.register(destinations: [DestinationRegistration(name: "one", buffered: true)])
        _ = await spool.append((0..<1000).map { fix("a", Int64($0)) })
        let reader = try spool.makeReader()
        let device = try #require(try reader.pendingDevices(destination: "one").first)
        for seq in (device.ackedSeq + 1)...device.lastSeq {
            var update = DeliveryUpdate(destination: "one")
            update.acknowledged = [(device.deviceID, seq)]
            spool.record(update)
        }
        await spool.flush()
        #expect(try reader.pendingDevices(destination: "one").isEmpty)
        spool.close()
        await spool.flush() // closed: returns at once rather than wait for a commit that cannot come
    }

    @Test func parkedDevicesShowInStatus() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "d", buffered: true)])
        _ = await spool.append([fix("ghost", 0), fix("ghost", 1), fix("real", 0)])
        var update = DeliveryUpdate(destination: "d")
        update.parked = [(1, WallClock.nowMs() + 60_000, "HTTP 400")]
        spool.record(update)
        _ = await spool.append([])
        let d = try #require(try spool.makeReader().status().destinations.first)
        #expect(d.parked == 2)
        #expect(d.parkedDevices == ["ghost"])
        #expect(d.pending == 3)
    }

    @Test func retentionDeletesOnlyDeliveredAndOld() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [
            DestinationRegistration(name: "d", buffered: true), DestinationRegistration(name: "rt", buffered: false),
        ])
        let receivedLongAgo = WallClock.nowMs() - 200 * 3_600_000
        _ = await spool.append([fix("a", 0), fix("a", 1), fix("a", 2)], receivedMs: receivedLongAgo)
        _ = await spool.append([fix("a", 3)])
        var update = DeliveryUpdate(destination: "d")
        update.acknowledged = [(1, 4)]
        update.quarantined = [(1, 2, "refused")]
        spool.record(update)
        _ = await spool.append([])
        // seq 1 and 3: delivered and old; seq 2: quarantined (kept); seq 4: delivered but recent.
        #expect(try spool.deleteExpired() == 2)
        let left = try spool.makeReader().positions(after: 0, limit: 10).map(\.seq)
        #expect(left == [2, 4])
    }

    /// What went ahead of a backlog is forgotten once the cursor has passed it or the position is
    /// gone, and kept while it is still pending (the backlog must skip it).
    @Test func retentionForgetsWhatWentAheadOnceItIsSettled() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [
            DestinationRegistration(name: "d", buffered: true), DestinationRegistration(name: "e", buffered: true),
        ])
        _ = await spool.append(
            [fix("a", 0), fix("a", 1), fix("a", 2)], receivedMs: WallClock.nowMs() - 200 * 3_600_000)
        _ = await spool.append([fix("a", 3)])
        var d = DeliveryUpdate(destination: "d")
        d.sentAhead = [1, 4]
        d.acknowledged = [(1, 2)]
        spool.record(d)
        var e = DeliveryUpdate(destination: "e")
        e.sentAhead = [1]
        spool.record(e)
        _ = await spool.append([])
        // Nothing is delivered to e, so no position goes; d's cursor has passed seq 1.
        #expect(try spool.deleteExpired() == 0)
        let rows = try spool.withWriterConnection { db in
            let select = try db.statement("SELECT destination || ':' || seq FROM alarm_sent ORDER BY destination, seq")
            var rows: [String] = []
            while try select.step() { rows.append(select.text(0) ?? "") }
            return rows
        }
        #expect(rows == ["d:4", "e:1"])
        #expect(try spool.makeReader().pendingAlarms(destination: "d").sent == [4])
    }

    @Test func quotaDropsOldestWhenNothingIsDelivered() async throws {
        let fixture = SpoolFixture(maxBytes: 1 << 20, whenFull: .dropOldest)
        let spool = try fixture.open()
        defer { spool.close() }
        let results = await fill(spool)
        #expect(results.allSatisfy { $0.seq != nil })
        let status = try spool.makeReader().status()
        #expect(status.usedBytes <= 1 << 20)
        #expect(status.counters["spool.dropped", default: 0] > 0)
        #expect(status.rows + Int(status.counters["spool.dropped"]!) == 20_000)
        // The newest survive.
        let newest = try spool.makeReader().positions(after: 19_990, limit: 100)
        #expect(newest.count == 10)
    }

    @Test func quotaRejectsWhenConfiguredAndKeepsWhatIsStored() async throws {
        let fixture = SpoolFixture(maxBytes: 1 << 20, whenFull: .reject)
        let spool = try fixture.open()
        defer { spool.close() }
        let results = await fill(spool)
        let stored = results.compactMap(\.seq)
        let rejected = results.filter { if case .failed(let e) = $0 { e.code == "spool-full" } else { false } }
        #expect(!rejected.isEmpty)
        #expect(stored.count + rejected.count == 20_000)
        // Nothing stored was lost, and a resend of a stored position is still answered ok.
        #expect(try spool.makeReader().status().rows == stored.count)
        #expect(await spool.append([fix("a", 0)]) == [.duplicate(seq: 1)])
        // Once delivered positions can go, new ones are taken again.
        var update = DeliveryUpdate(destination: "down")
        update.acknowledged = [(1, Int64(stored.count))]
        spool.record(update)
        _ = await spool.append([])
        let after = await spool.append([fix("a", 100_000)])
        #expect(after.first?.seq != nil)
    }

    @Test func refusesASpoolFromANewerRelay() throws {
        let fixture = SpoolFixture()
        do {
            let spool = try fixture.open()
            try spool.withWriterConnection { db in try db.execute("PRAGMA user_version = 99") }
            spool.close()
        }
        #expect {
            try fixture.open()
        } throws: { error in
            (error as? SpoolError)?.code == .newerSchema(99) && "\(error)".contains("newer")
        }
        #expect {
            try SpoolReader(path: fixture.settings.path)
        } throws: { error in
            (error as? SpoolError)?.code == .newerSchema(99)
        }
    }

    @Test func diagnosticLogIsBoundedAndClearable() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        for i in 0..<(SpoolStore.logCapacity + 1_500) {
            spool.log(LogEntry(timeMs: Int64(i), level: .info, message: "entry \(i)"))
        }
        _ = await spool.append([])
        try spool.withWriterConnection { db in
            try db.execute("DELETE FROM log WHERE id <= (SELECT max(id) FROM log) - \(SpoolStore.logCapacity)")
        }
        let entries = try spool.makeReader().logEntries()
        #expect(entries.count == SpoolStore.logCapacity)
        #expect(entries.last?.message == "entry \(SpoolStore.logCapacity + 1_499)")
        #expect(entries.first?.message == "entry 1500")
        try await spool.clearLog()
        #expect(try spool.makeReader().logEntries().isEmpty)
    }

    @Test func concurrentAppendsAreGroupCommitted() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        defer { spool.close() }
        let results = await withTaskGroup(of: [AppendResult].self) { group in
            for device in 0..<8 {
                group.addTask {
                    var all: [AppendResult] = []
                    for second in 0..<200 { all += await spool.append([fix("d\(device)", Int64(second))]) }
                    return all
                }
            }
            var all: [AppendResult] = []
            for await r in group { all += r }
            return all
        }
        #expect(Set(results.compactMap(\.seq)).count == 1600)
    }

    @Test func theWritersHeartbeatTurnsOverWhenIdleAndAgesOnlyWhileItIsStalled() async throws {
        let fixture = SpoolFixture()
        fixture.settings.turnInterval = .milliseconds(50)
        let spool = try fixture.open()
        defer { spool.close() }
        // The daemon runs the upkeep as one of its parts; opening a spool starts nothing.
        let upkeep = Task { await spool.runUpkeep() }
        defer { upkeep.cancel() }
        let heartbeat = spool.writerHeartbeat
        let opened = heartbeat.lastBeatMs
        // No job at all, yet the writer turns over: the timer on its queue beats.
        #expect(waitUntil("an idle beat 200 ms after opening") { heartbeat.lastBeatMs >= opened + 200 })
        #expect(heartbeat.ageMs() < 200)
        spool.stallWriterForTesting(.seconds(2))
        #expect(waitUntil("the stalled writer's heartbeat to age 400 ms") { heartbeat.ageMs() >= 400 })
        // A write waits for the stall: the queue is wedged, not just its timer.
        let stored = await spool.append([fix("a", 0)])
        #expect(stored == [.stored(seq: 1)])
        #expect(heartbeat.ageMs() < 200)
    }

    /// Polls `condition` every 5 ms for at most 10 s. On this thread, not by suspending: a
    /// heartbeat has no event to await, and a stall is a window that a task waiting its turn
    /// on a busy cooperative pool could sleep through.
    func waitUntil(_ what: String, _ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            if ContinuousClock.now >= deadline {
                Issue.record("gave up after 10 s waiting for \(what)")
                return false
            }
            usleep(5000)
        }
        return true
    }
}

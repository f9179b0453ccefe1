import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// Status counts pending positions and rows from running totals (stored minus settled,
/// stored minus deleted) instead of counting the backlog: through acknowledgements,
/// quarantine, a destination added later, a merge, retention and the quota's drops, the
/// totals must equal what counting the rows says.
@Suite(.offThePool) struct StatusCountTests {
    /// Pending per destination and rows, counted the slow way.
    private func counted(_ spool: Spool) throws -> (pending: [String: Int], rows: Int) {
        try spool.withWriterConnection { db in
            let pending = try db.statement(
                """
                SELECT dst.name, (SELECT count(*) FROM (
                    SELECT seq, device_id FROM positions UNION ALL SELECT seq, device_id FROM recent) p
                    JOIN devices d ON d.id = p.device_id AND d.hidden = 0
                    LEFT JOIN cursors c ON c.destination = dst.name AND c.device_id = p.device_id
                    WHERE p.seq > coalesce(c.acked_seq, dst.start_seq))
                FROM destinations dst WHERE dst.buffered = 1
                """)
            var byName: [String: Int] = [:]
            while try pending.step() { byName[pending.text(0) ?? ""] = pending.int(1) }
            pending.reset()
            let rows = try db.statement("SELECT (SELECT count(*) FROM positions) + (SELECT count(*) FROM recent)")
            _ = try rows.step()
            defer { rows.reset() }
            return (byName, rows.int(0))
        }
    }

    private func expectTotalsMatch(_ spool: Spool, _ step: String, sourceLocation: SourceLocation = #_sourceLocation)
        throws
    {
        let status = try spool.makeReader().status()
        let truth = try counted(spool)
        var fromTotals: [String: Int] = [:]
        for destination in status.destinations where destination.buffered {
            fromTotals[destination.name] = destination.pending
        }
        #expect(fromTotals == truth.pending, "pending after \(step)", sourceLocation: sourceLocation)
        #expect(status.rows == truth.rows, "rows after \(step)", sourceLocation: sourceLocation)
    }

    @Test func pendingAndRowsStayExactThroughAcknowledgementsMergesAndANewDestination() async throws {
        let fixture = SpoolFixture()
        fixture.settings.retainHours = 0
        do {
            let spool = try fixture.open()
            _ = await spool.append([fix("before", 0)])
            try await spool.register(destinations: [DestinationRegistration(name: "one", buffered: true)])
            for batch in 0..<3 {
                _ = await spool.append((0..<300).map { fix(["a", "b", "c"][$0 % 3], Int64(batch * 300 + $0)) })
            }
            try expectTotalsMatch(spool, "appends")
            // Acknowledgements, a quarantine and an acknowledgement that does not move the cursor.
            var update = DeliveryUpdate(destination: "one")
            update.acknowledged = [(2, 200), (3, 150)]
            update.quarantined = [(2, 230, "HTTP 413")]
            spool.record(update)
            var stale = DeliveryUpdate(destination: "one")
            stale.acknowledged = [(2, 100)]
            spool.record(stale)
            await spool.flush()
            try expectTotalsMatch(spool, "acknowledgements")
            try await spool.register(destinations: [
                DestinationRegistration(name: "one", buffered: true),
                DestinationRegistration(name: "two", buffered: true),
            ])
            _ = await spool.append([fix("a", 5000), fix("late", 0)])
            try expectTotalsMatch(spool, "a destination added later")
            spool.close()
        }
        // Reopened: the close merged recent into positions; retention then deletes what both had.
        let spool = try fixture.open()
        defer { spool.close() }
        try expectTotalsMatch(spool, "the merge at close")
        var update = DeliveryUpdate(destination: "one")
        update.acknowledged = [(1, 1), (2, 400), (3, 400), (4, 400)]
        spool.record(update)
        var two = DeliveryUpdate(destination: "two")
        two.acknowledged = [(2, 902)]
        spool.record(two)
        await spool.flush()
        #expect(try spool.deleteExpired(nowMs: WallClock.nowMs() + 1000) > 0)
        try expectTotalsMatch(spool, "retention")
    }

    @Test func pendingAndRowsStayExactWhenTheQuotaDropsUndeliveredPositions() async throws {
        let fixture = SpoolFixture(maxBytes: 1 << 20, whenFull: .dropOldest)
        let spool = try fixture.open()
        defer { spool.close() }
        try await spool.register(destinations: [DestinationRegistration(name: "ahead", buffered: true)])
        _ = await fill(spool)
        var update = DeliveryUpdate(destination: "ahead")
        update.acknowledged = [(1, 19_000)]
        spool.record(update)
        await spool.flush()
        let status = try spool.makeReader().status()
        #expect(status.counters["spool.dropped", default: 0] > 0, "the quota dropped positions nobody had")
        try expectTotalsMatch(spool, "drops")
    }
}

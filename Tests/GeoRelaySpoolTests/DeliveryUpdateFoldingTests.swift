import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// A destination's delivery updates are folded into one while they wait for their commit: what
/// the spool holds afterwards is what it would hold had each been applied on its own.
@Suite(.offThePool) struct DeliveryUpdateFoldingTests {
    /// Updates touching every field, in an order where folding could go wrong: a cursor moving
    /// forward in one update and not in the next, a park and then the unpark, a success time
    /// followed by a state without one, a filter state replaced.
    static func updates(_ destination: String) -> [DeliveryUpdate] {
        var filter = FilterState()
        filter.lastSentMs = 5_000
        filter.newestSentMs = 5_000
        var later = filter
        later.lastSentMs = 9_000
        later.stopped = true

        var first = DeliveryUpdate(destination: destination)
        first.acknowledged = [(1, 3), (2, 12), (1, 5)]
        first.filterStates = [(1, filter), (2, filter)]
        first.sent = 3
        first.wireBytes = 600
        first.payloadBytes = 400
        first.state = .init(state: .online, lastSuccessMs: 1_000)
        first.parked = [(3, 99_000, "unknown device")]
        first.drain = true

        var second = DeliveryUpdate(destination: destination)
        second.acknowledged = [(1, 4), (2, 14)]
        second.quarantined = [(1, 7, "HTTP 400")]
        second.quarantinedUnreached = [(16, "not sent: lat 91")]
        second.filterStates = [(1, later)]
        second.sentAhead = [20]
        second.sent = 2
        second.wireBytes = 300
        second.state = .init(state: .backoff, lastError: "HTTP 503", nextAttemptMs: 50_000)
        second.encoding = "gzip"

        var third = DeliveryUpdate(destination: destination)
        third.parked = [(3, nil, nil)]
        third.replayed = [2]
        third.sent = 1
        return [first, second, third]
    }

    @Test func absorbingIsApplyingOneAfterTheOther() {
        let updates = Self.updates("d")
        var folded = updates[0]
        for update in updates.dropFirst() { folded.absorb(update) }
        #expect(folded.acknowledged.map { [$0.deviceID, $0.seq] } == [[1, 5], [2, 14]])
        #expect(folded.filterStates.count == 2 && folded.filterStates[0].state.lastSentMs == 9_000)
        #expect(folded.quarantined.map(\.seq) == [7] && folded.quarantinedUnreached.map(\.seq) == [16])
        #expect(folded.parked.map(\.untilMs) == [99_000, nil], "the park, then the unpark, in order")
        #expect(folded.sent == 6 && folded.wireBytes == 900 && folded.payloadBytes == 400)
        #expect(folded.state?.state == .backoff && folded.state?.lastError == "HTTP 503")
        #expect(folded.state?.lastSuccessMs == 1_000, "the earlier success time kept")
        #expect(folded.encoding == "gzip" && folded.sentAhead == [20] && folded.replayed == [2] && folded.drain)
    }

    /// The same updates through a spool that applies each at once and one that holds them for
    /// its state interval (folded), then flushed: the same rows.
    @Test func aHeldAndFoldedSequenceLeavesTheSpoolAsAppliedOneByOne() async throws {
        var rows: [[String]] = []
        for interval in [Duration.zero, .seconds(15)] {
            let fixture = SpoolFixture()
            fixture.settings.stateInterval = interval
            let spool = try fixture.open()
            try await spool.register(destinations: [DestinationRegistration(name: "d", buffered: true)])
            _ = await spool.append((0..<20).map { fix($0 < 10 ? "a" : "b", Int64($0)) })
            for update in Self.updates("d") { spool.record(update) }
            await spool.flush()
            spool.close()
            rows.append(try Self.rows(fixture.settings.path))
        }
        #expect(rows[0] == rows[1])
        #expect(rows[0].contains { $0.hasPrefix("cursors") }, "the test reads what it compares: \(rows[0])")
    }

    static func rows(_ path: String) throws -> [String] {
        let db = try SQLiteDatabase(path: path)
        var rows: [String] = []
        for (table, query) in [
            ("cursors", "SELECT device_id, acked_seq, settled, parked_until_ms, parked_reason FROM cursors ORDER BY 1"),
            ("filter_state", "SELECT device_id, last_sent_ms, newest_sent_ms, stopped FROM filter_state ORDER BY 1"),
            ("quarantine", "SELECT seq, reason FROM quarantine ORDER BY 1"),
            ("alarm_sent", "SELECT seq FROM alarm_sent ORDER BY 1"),
            (
                "destinations",
                "SELECT sent, wire_bytes, state, last_error, next_attempt_ms, last_success_ms, encoding FROM destinations"
            ),
        ] {
            let statement = try db.statement(query)
            while try statement.step() {
                let columns = (0..<statement.columnCount).map {
                    statement.isNull($0) ? "null" : statement.text($0) ?? "?"
                }
                rows.append("\(table): \(columns.joined(separator: ", "))")
            }
        }
        return rows
    }
}

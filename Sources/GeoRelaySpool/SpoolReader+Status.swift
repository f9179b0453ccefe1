import GeoRelayCore
import Glibc

/// What `georelay status` shows, read from the spool alone, so it works with the daemon down.
package struct SpoolStatus: Sendable, Equatable {
    package struct Destination: Sendable, Equatable {
        package var name: String
        package var buffered: Bool
        package var state: String
        package var pending: Int
        /// The fix time of the first waiting position of each device (in arrival order), the oldest of those.
        package var oldestPendingFixMs: Int64?
        package var lastSuccessMs: Int64?
        package var lastError: String?
        package var nextAttemptMs: Int64?
        package var sent: Int64
        package var wireBytes: Int64
        package var quarantined: Int
        /// Positions of devices the server does not know, waiting.
        package var parked: Int
        package var parkedDevices: [String]
        /// When the forwarder last recorded anything (nil: never ran).
        package var updatedMs: Int64?
        /// The body encoding a push destination uses (after any 415 fallback).
        package var encoding: String?
        /// Positions per second acknowledged lately (nil: nothing sent in the last minute).
        package var sendRate: Double?
        /// Positions queued again by `georelay replay`, not yet sent.
        package var replayPending = 0
        package var wireBytesToday: Int64 = 0
        package var wireBytesThisMonth: Int64 = 0
        /// Of `sent`, delivered behind a newer position of their device: Traccar raised no event for them.
        package var behindNewer: Int64 = 0

        /// A destination the spool has no record of yet.
        package static func notStarted(name: String, buffered: Bool) -> Destination {
            Destination(
                name: name, buffered: buffered, state: "not started", pending: 0, oldestPendingFixMs: nil,
                lastSuccessMs: nil,
                lastError: nil, nextAttemptMs: nil, sent: 0, wireBytes: 0, quarantined: 0, parked: 0, parkedDevices: [],
                updatedMs: nil, encoding: nil, sendRate: nil)
        }
    }

    package struct Device: Sendable, Equatable {
        package var name: String
        package var lastFixMs: Int64?
        package var lastReceivedMs: Int64?
        /// Positions stored for it, ever.
        package var received: Int64 = 0
    }

    package var destinations: [Destination]
    package var devices: [Device]
    package var rows: Int
    package var fileBytes: Int64
    package var usedBytes: Int64
    package var counters: [String: Int64]
    /// Each watched vessel's integrity, by device (none for a vessel whose watch never left `ok`).
    package var integrity: [String: IntegrityRecord] = [:]
}

extension SpoolReader {
    package func status(nowMs: Int64? = nil) throws(SpoolError) -> SpoolStatus {
        let nowMs = nowMs ?? clock.nowMs()
        // One read transaction: every figure from the same commit, even while the writer goes on.
        return try inReadTransaction {
            var destinations: [SpoolStatus.Destination] = []
            let select = try db.statement(
                """
                SELECT name, buffered, state, last_success_ms, last_error, next_attempt_ms, sent, wire_bytes,
                       (SELECT count(*) FROM quarantine q WHERE q.destination = name), updated_ms, encoding, send_rate, rate_updated_ms,
                       behind_newer
                FROM destinations ORDER BY name
                """)
            while try select.step() {
                destinations.append(
                    SpoolStatus.Destination(
                        name: select.text(0) ?? "", buffered: select.int64(1) != 0, state: select.text(2) ?? "online",
                        pending: 0, oldestPendingFixMs: nil,
                        lastSuccessMs: select.optionalInt64(3), lastError: select.text(4),
                        nextAttemptMs: select.optionalInt64(5),
                        sent: select.int64(6), wireBytes: select.int64(7), quarantined: select.int(8), parked: 0,
                        parkedDevices: [],
                        updatedMs: select.optionalInt64(9), encoding: select.text(10),
                        sendRate: select.optionalInt64(12).flatMap {
                            nowMs - $0 < 60_000 ? select.optionalDouble(11) : nil
                        }))
                destinations[destinations.count - 1].behindNewer = select.int64(13)
            }
            // Pending from the cursors' running counts (stored minus settled), and the oldest by
            // the first row after each cursor: the same cost with ten million waiting as with ten.
            let firstWaiting = SpoolReader.bothTables(
                "SELECT fix_ms, seq FROM %TABLE WHERE device_id = ?1 AND seq > ?2", then: "ORDER BY seq LIMIT 1")
            for index in destinations.indices where destinations[index].buffered {
                // pendingDevices resets every statement when it returns: the one below is fetched after.
                for cursor in try pendingDevices(destination: destinations[index].name) where cursor.pending > 0 {
                    destinations[index].pending += cursor.pending
                    let first = try db.statement(firstWaiting)
                    first.bind(1, cursor.deviceID)
                    first.bind(2, cursor.ackedSeq)
                    if try first.step() {
                        destinations[index].oldestPendingFixMs = min(
                            destinations[index].oldestPendingFixMs ?? .max, first.int64(0))
                    }
                    first.reset()
                    if cursor.parkedUntilMs != nil {
                        destinations[index].parked += cursor.pending
                        destinations[index].parkedDevices.append(cursor.device)
                    }
                }
            }
            let replays = try db.statement("SELECT count(*) FROM replay_queue WHERE destination = ?")
            for index in destinations.indices {
                replays.reset()
                replays.bind(1, destinations[index].name)
                if try replays.step() { destinations[index].replayPending = replays.int(0) }
            }
            let today = String(Timestamp.iso8601(milliseconds: nowMs).prefix(10))
            let wire = try db.statement(
                """
                SELECT coalesce(sum(CASE WHEN day = ?2 THEN bytes ELSE 0 END), 0), coalesce(sum(bytes), 0)
                FROM wire_daily WHERE destination = ?1 AND day >= ?3
                """)
            for index in destinations.indices {
                wire.reset()
                wire.bind(1, destinations[index].name)
                wire.bind(2, today)
                wire.bind(3, String(today.prefix(7)) + "-01")
                if try wire.step() {
                    destinations[index].wireBytesToday = wire.int64(0)
                    destinations[index].wireBytesThisMonth = wire.int64(1)
                }
            }
            var devices: [SpoolStatus.Device] = []
            let deviceRows = try db.statement(
                "SELECT name, last_fix_ms, last_received_ms, received FROM device_totals ORDER BY name")
            while try deviceRows.step() {
                devices.append(
                    SpoolStatus.Device(
                        name: deviceRows.text(0) ?? "", lastFixMs: deviceRows.optionalInt64(1),
                        lastReceivedMs: deviceRows.optionalInt64(2), received: deviceRows.int64(3)))
            }
            var counters: [String: Int64] = [:]
            let counterRows = try db.statement("SELECT name, value FROM counters")
            while try counterRows.step() { counters[counterRows.text(0) ?? ""] = counterRows.int64(1) }
            // Stored minus deleted: counting ten million rows would take seconds.
            let rows = try db.statement(
                """
                SELECT coalesce((SELECT sum(received) FROM device_totals), 0) - coalesce((SELECT value FROM counters WHERE name = 'spool.deleted'), 0)
                """)
            _ = try rows.step()
            let pageSize = Int64(try db.pragma("page_size") ?? "4096") ?? 4096
            let used =
                ((Int64(try db.pragma("page_count") ?? "0") ?? 0) - (Int64(try db.pragma("freelist_count") ?? "0") ?? 0))
                * pageSize
            var fileBytes: Int64 = 0
            for suffix in ["", "-wal"] {
                fileBytes += FileStatus.size(atPath: db.path + suffix) ?? 0
            }
            return SpoolStatus(
                destinations: destinations, devices: devices, rows: rows.int(0), fileBytes: fileBytes, usedBytes: used,
                counters: counters, integrity: try integrityRecords())
        }
    }

}

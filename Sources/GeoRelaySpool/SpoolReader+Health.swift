import FoundationEssentials
import GeoRelayCore
import Glibc

/// What the device-health checks read from the spool: each receiver's last fixes and the
/// fixes a week-number rollover dated 1024 weeks back, and the file's integrity.
///
/// Read-only, like the rest of `SpoolReader`: safe while the daemon runs.
package struct ReceiverRecord: Sendable, Equatable {
    package var name: String
    /// A source of a multi-source device (stored, never forwarded as itself).
    package var hidden: Bool
    package var lastFixMs: Int64?
    package var lastReceivedMs: Int64?
    /// The newest stored position's fix and reception times (by seq, not by fix time:
    /// a rollover fix dated 2006 is still the newest one received).
    package var newestFixMs: Int64?
    package var newestReceivedMs: Int64?
    /// Stored fixes dated about 1024 weeks before they were received.
    package var rolloverFixes: Int64
    /// Lines refused as `time` for a missing time (`ingest.untimed.<device>`).
    package var untimedFixes: Int64

    package init(
        name: String, hidden: Bool = false, lastFixMs: Int64? = nil, lastReceivedMs: Int64? = nil,
        newestFixMs: Int64? = nil,
        newestReceivedMs: Int64? = nil, rolloverFixes: Int64 = 0, untimedFixes: Int64 = 0
    ) {
        self.name = name
        self.hidden = hidden
        self.lastFixMs = lastFixMs
        self.lastReceivedMs = lastReceivedMs
        self.newestFixMs = newestFixMs
        self.newestReceivedMs = newestReceivedMs
        self.rolloverFixes = rolloverFixes
        self.untimedFixes = untimedFixes
    }
}

/// GPS week-number rollover: the 10-bit week counter of old receivers wraps every 1024 weeks
/// (about 19.6 years), so a unit that does not know the current epoch dates its fixes exactly
/// that much too early.
package enum WeekRollover {
    package static let periodMs: Int64 = 1024 * 7 * 86_400_000
    /// A fix is taken as rolled over when it is between 1023 and 1025 weeks older than its
    /// reception: a week either side covers a collector's backlog and a clock slightly off,
    /// and no real fix is 19.6 years old.
    package static let toleranceMs: Int64 = 7 * 86_400_000

    package static func isRolledOver(fixMs: Int64, receivedMs: Int64) -> Bool {
        receivedMs.saturatingMinus(fixMs).saturatingMinus(periodMs).magnitude <= toleranceMs.magnitude
    }
}

extension SpoolReader {
    /// Every receiver the spool knows, with its rollover fixes counted.
    ///
    /// Cheap on a large spool: the rollover count is a range over the `(device_id, fix_ms)`
    /// index below `nowMs` minus 1023 weeks, which holds no rows on a healthy box, and the
    /// newest position is the last entry of the `device_id` index.
    package func receivers(nowMs: Int64? = nil) throws(SpoolError) -> [ReceiverRecord] {
        let nowMs = nowMs ?? clock.nowMs()
        return try inReadTransaction {
            var counters: [String: Int64] = [:]
            let counterRows = try db.statement("SELECT name, value FROM counters WHERE name LIKE 'ingest.untimed.%'")
            while try counterRows.step() { counters[counterRows.text(0) ?? ""] = counterRows.int64(1) }
            let newest = try db.statement(
                SpoolReader.bothTables(
                    """
                    SELECT fix_ms, received_ms, seq FROM %TABLE WHERE device_id = ?1
                    """, then: "ORDER BY seq DESC LIMIT 1"))
            let rollover = try db.statement(
                """
                SELECT count(*) FROM (\(SpoolReader.bothTables("""
                SELECT seq FROM %TABLE WHERE device_id = ?1 AND fix_ms < ?2 AND abs(received_ms - fix_ms - ?3) <= ?4
                """, then: "")))
                """)
            var records: [ReceiverRecord] = []
            let devices = try db.statement(
                "SELECT id, name, hidden, last_fix_ms, last_received_ms FROM device_totals ORDER BY name")
            while try devices.step() {
                let id = devices.int64(0)
                let name = devices.text(1) ?? ""
                var record = ReceiverRecord(
                    name: name, hidden: devices.int64(2) != 0, lastFixMs: devices.optionalInt64(3),
                    lastReceivedMs: devices.optionalInt64(4),
                    untimedFixes: counters.removeValue(forKey: "ingest.untimed.\(name)") ?? 0)
                newest.reset()
                newest.bind(1, id)
                if try newest.step() {
                    record.newestFixMs = newest.int64(0)
                    record.newestReceivedMs = newest.int64(1)
                }
                rollover.reset()
                rollover.bind(1, id)
                rollover.bind(2, nowMs - WeekRollover.periodMs + WeekRollover.toleranceMs)
                rollover.bind(3, WeekRollover.periodMs)
                rollover.bind(4, WeekRollover.toleranceMs)
                if try rollover.step() { record.rolloverFixes = rollover.int64(0) }
                records.append(record)
            }
            // A receiver whose every line lacked a time has no devices row: it is named all the same.
            for (key, value) in counters.sorted(by: { $0.key < $1.key }) {
                records.append(
                    ReceiverRecord(name: String(key.dropFirst("ingest.untimed.".count)), untimedFixes: value))
            }
            return records
        }
    }

    /// When the oldest position still waiting for `destination` arrived (nil: nothing waits):
    /// how long a destination that never delivered has been holding things up.
    ///
    /// Per device the first row after its cursor, on the `device_id` index (seq order is arrival
    /// order), so a large backlog costs one row per device, not a scan.
    package func oldestWaitingReceivedMs(destination: String) throws(SpoolError) -> Int64? {
        let cursors = try pendingDevices(destination: destination)
        return try wrap {
            let first = try db.statement(
                SpoolReader.bothTables(
                    """
                    SELECT received_ms, seq FROM %TABLE WHERE device_id = ?1 AND seq > ?2
                    """, then: "ORDER BY seq LIMIT 1"))
            var oldest: Int64?
            for cursor in cursors {
                first.reset()
                first.bind(1, cursor.deviceID)
                first.bind(2, cursor.ackedSeq)
                if try first.step() { oldest = min(oldest ?? .max, first.int64(0)) }
            }
            return oldest
        }
    }

    /// The WAL's size in bytes beside the database (0 when there is none).
    package var walBytes: Int64 {
        FileStatus.size(atPath: db.path + "-wal") ?? 0
    }
}

extension SpoolReader {
    /// SQLite's `PRAGMA quick_check` on a read-only connection of its own: the problems it
    /// reports (at most `limit` answers), one line each, none for a sound file.
    ///
    /// `quick_check` verifies every page's structure and the records' format but, unlike
    /// `integrity_check`, not that indexes match their tables, so it runs in about the time
    /// of one read of the file. A read-only connection in WAL mode never blocks the writer,
    /// so this is safe while the daemon runs. The schema version is not checked: a spool
    /// that a newer relay wrote can be checked too. A file SQLite cannot even open (its header
    /// destroyed) is reported as that one problem, not thrown.
    package static func integrityProblems(path: String, limit: Int = 20) throws(SpoolError) -> [String] {
        guard FileManager.default.fileExists(atPath: path) else { throw .notFound("no spool at \(path)") }
        do {
            let db = try SQLiteDatabase(path: path, readOnly: true)
            let check = try db.statement("PRAGMA quick_check(\(max(1, limit)))")
            var problems: [String] = []
            while try check.step() {
                // One answer can hold several lines under a "*** in database main ***" heading: one problem each.
                for line in (check.text(0) ?? "").split(separator: "\n")
                where line != "ok" && !line.hasPrefix("*** in database") {
                    problems.append(String(line))
                }
            }
            return problems
        } catch {
            return ["\(error)"]
        }
    }

    /// The newest spool schema this relay reads and writes.
    package static var newestReadableSchema: Int { Schema.currentVersion }

    /// The schema version of the spool at `path` (0: no spool yet), read without migrating or
    /// writing anything, for the package's scripts to tell whether a version can read it. Run as
    /// root, SQLite gives any `-wal` or `-shm` file it creates the database's owner.
    package static func schemaVersion(path: String) throws(SpoolError) -> Int {
        guard FileManager.default.fileExists(atPath: path) else { return 0 }
        return try SpoolError.wrapping {
            let db = try SQLiteDatabase(path: path, readOnly: true)
            return Int(try db.pragma("user_version") ?? "0") ?? 0
        }
    }
}

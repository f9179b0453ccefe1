import GeoRelayCore

/// A read-only view of the spool on its own connection.
///
/// Not `Sendable`: each forwarder owns one and uses it from one serial queue.
/// Reads see the last committed state and never block the writer (WAL).
package final class SpoolReader {
    let db: SQLiteDatabase
    /// The time status and health are judged at, when not given.
    let clock: any RelayClock

    init(path: String, clock: any RelayClock = SystemClock()) throws(SpoolError) {
        db = try SpoolConnection.openReader(path: path)
        self.clock = clock
    }

    /// Opens a reader on a spool file directly (`georelay status` with the daemon down).
    package static func open(path: String) throws(SpoolError) -> SpoolReader {
        try SpoolReader(path: path)
    }

    func wrap<T>(_ body: () throws -> T) throws(SpoolError) -> T {
        defer { db.resetStatements() }
        return try SpoolError.wrapping(body)
    }

    /// Runs `body` in one read transaction: every read in it sees the same commit, however
    /// many statements it takes and whatever the writer commits meanwhile.
    package func snapshot<T>(_ body: (SpoolReader) throws(SpoolError) -> T) throws(SpoolError) -> T {
        try inReadTransaction { try body(self) }
    }

    /// `body`'s statements in one read transaction, their errors the spool's: what `snapshot`
    /// and the readers that take several statements to answer (status, a track) run in.
    func inReadTransaction<T>(_ body: () throws -> T) throws(SpoolError) -> T {
        try wrap {
            try db.execute("BEGIN")
            defer {
                db.resetStatements()
                try? db.execute("COMMIT")
            }
            return try body()
        }
    }

    /// A number that changes whenever another connection commits (SQLite's `PRAGMA data_version`):
    /// whoever polls the status re-reads it only when it moved.
    package func dataVersion() throws(SpoolError) -> Int64 {
        try wrap {
            let select = try db.statement("PRAGMA data_version")
            _ = try select.step()
            return select.int64(0)
        }
    }

    /// The highest seq ever stored (0 for an empty spool).
    package func newestSeq() throws(SpoolError) -> Int64 {
        try wrap {
            let select = try db.statement(
                """
                SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'positions'), 0),
                           coalesce((SELECT max(seq) FROM recent), 0))
                """)
            _ = try select.step()
            return select.int64(0)
        }
    }

    /// Every device with positions this destination has not acknowledged.
    package func pendingDevices(destination: String) throws(SpoolError) -> [DeviceCursor] {
        try wrap {
            let select = try db.statement(
                """
                SELECT d.id, d.name, coalesce(c.acked_seq, dst.start_seq), d.last_seq, c.parked_until_ms,
                       max(0, d.received - coalesce(c.settled, 0))
                FROM destinations dst CROSS JOIN device_totals d
                LEFT JOIN cursors c ON c.destination = dst.name AND c.device_id = d.id
                WHERE dst.name = ? AND d.hidden = 0 AND d.last_seq > coalesce(c.acked_seq, dst.start_seq)
                ORDER BY d.id
                """)
            select.bind(1, destination)
            var cursors: [DeviceCursor] = []
            while try select.step() {
                cursors.append(
                    DeviceCursor(
                        deviceID: select.int64(0), device: select.text(1) ?? "", ackedSeq: select.int64(2),
                        lastSeq: select.int64(3), parkedUntilMs: select.optionalInt64(4), pending: select.int(5)))
            }
            return cursors
        }
    }

    /// A device's positions after `seq`, oldest first.
    package func positions(deviceID: Int64, device: String, after seq: Int64, limit: Int) throws(SpoolError)
        -> [StoredPosition]
    {
        try wrap {
            let select = try db.statement(
                Self.bothTables(
                    """
                    SELECT \(Self.columns) FROM %TABLE WHERE device_id = ?1 AND seq > ?2
                    """, then: "ORDER BY seq LIMIT ?3"))
            select.bind(1, deviceID)
            select.bind(2, seq)
            select.bind(3, limit)
            var rows: [StoredPosition] = []
            while try select.step() {
                rows.append(
                    StoredPosition(
                        seq: select.int64(0), deviceID: deviceID, receivedMs: select.int64(1),
                        position: Self.readPosition(select, device: device)))
            }
            return rows
        }
    }

    /// Each device's newest position (its cursor's `lastSeq`): where it is now, for the
    /// still-alive minimum an uplink with a spent budget still carries, and to go ahead of a backfill.
    package func newest(of cursors: [DeviceCursor]) throws(SpoolError) -> [StoredPosition] {
        var newest: [StoredPosition] = []
        for cursor in cursors {
            if let last = try positions(
                deviceID: cursor.deviceID, device: cursor.device, after: cursor.lastSeq - 1, limit: 1
            ).first {
                newest.append(last)
            }
        }
        return newest
    }

    /// Positions stored after `seq` across all devices, oldest first (real-time-only destinations).
    package func positions(after seq: Int64, limit: Int) throws(SpoolError) -> [StoredPosition] {
        try wrap {
            let select = try db.statement(
                Self.bothTables(
                    """
                    SELECT \(Self.columns(of: "p")), p.device_id, d.name
                    FROM %TABLE p JOIN devices d ON d.id = p.device_id WHERE p.seq > ?1 AND d.hidden = 0
                    """, then: "ORDER BY seq LIMIT ?2"))
            select.bind(1, seq)
            select.bind(2, limit)
            return try storedRowsWithDevice(select)
        }
    }

    /// One query over both tables a position can be in, as one statement so it reads one
    /// snapshot (a merge between two statements would hide the rows it moved). `%TABLE`
    /// in `select` names the table; `then` orders the whole, by result column names.
    /// SQLite runs it as a merge of the two ordered searches, so a LIMIT stops both early.
    static func bothTables(_ select: String, then: String) -> String {
        """
        \(select.replacing("%TABLE", with: "positions"))
        UNION ALL
        \(select.replacing("%TABLE", with: "recent"))
        \(then)
        """
    }

    /// The columns every reader selects, in the order `readPosition` and `StoredPosition` read them.
    static let columns = columnNames.joined(separator: ", ")
    static func columns(of table: String) -> String { columnNames.map { "\(table).\($0)" }.joined(separator: ", ") }
    private static let columnNames = [
        "seq", "received_ms", "fix_ms", "lat", "lon", "speed", "course", "altitude", "accuracy", "battery", "charging",
        "alarm", "attributes", "odometer",
    ]

    /// A position from a row whose columns 2… are fix_ms, lat, lon, speed, course,
    /// altitude, accuracy, battery, charging, alarm, attributes, odometer (every reader's SELECT).
    /// Rows of a query selecting the position columns, then `device_id` and the device's name.
    private func storedRowsWithDevice(_ select: SQLiteStatement) throws(SQLiteError) -> [StoredPosition] {
        var rows: [StoredPosition] = []
        while try select.step() {
            rows.append(
                StoredPosition(
                    seq: select.int64(0), deviceID: select.int64(14), receivedMs: select.int64(1),
                    position: Self.readPosition(select, device: select.text(15) ?? "")))
        }
        return rows
    }

    static func readPosition(_ s: SQLiteStatement, device: String) -> Position {
        Position(
            device: device, timeMs: s.int64(2), lat: s.double(3), lon: s.double(4),
            speed: s.optionalDouble(5), course: s.optionalDouble(6), altitude: s.optionalDouble(7),
            accuracy: s.optionalDouble(8), battery: s.optionalDouble(9),
            charging: s.isNull(10) ? nil : s.int64(10) != 0, alarm: s.text(11), odometer: s.optionalDouble(13),
            attributes: s.text(12).map { [Attribute](jsonText: $0) } ?? [])
    }

    /// The location filter's memory for every device of a destination.
    package func filterStates(destination: String) throws(SpoolError) -> [Int64: FilterState] {
        try wrap {
            let select = try db.statement(
                """
                SELECT device_id, last_sent_ms, last_sent_lat, last_sent_lon, last_sent_course, newest_sent_ms,
                       anchor_lat, anchor_lon, anchor_since_ms, stopped, last_sent_odometer, newest_sent_odometer
                FROM filter_state WHERE destination = ?
                """)
            select.bind(1, destination)
            var states: [Int64: FilterState] = [:]
            while try select.step() {
                var state = FilterState()
                state.lastSentMs = select.optionalInt64(1)
                state.lastSentLat = select.double(2)
                state.lastSentLon = select.double(3)
                state.lastSentCourse = select.optionalDouble(4)
                state.newestSentMs = select.optionalInt64(5)
                state.anchorLat = select.optionalDouble(6)
                state.anchorLon = select.optionalDouble(7)
                state.anchorSinceMs = select.int64(8)
                state.stopped = select.int64(9) != 0
                state.lastSentOdometer = select.optionalDouble(10)
                state.newestSentOdometer = select.optionalDouble(11)
                states[select.int64(0)] = state
            }
            return states
        }
    }

    /// Alarms this destination has not had yet, oldest first, and which of its pending
    /// positions it already had ahead of their backlog: alarms, and the still-alive positions
    /// an uplink with a spent budget carried (`alarm_sent` keeps its name from before those).
    package func pendingAlarms(destination: String) throws(SpoolError) -> (unsent: [StoredPosition], sent: Set<Int64>) {
        try wrap {
            let select = try db.statement(
                Self.bothTables(
                    """
                    SELECT \(Self.columns(of: "p")), p.device_id, d.name
                    FROM %TABLE p JOIN devices d ON d.id = p.device_id
                    JOIN destinations dst ON dst.name = ?1
                    LEFT JOIN cursors c ON c.destination = ?1 AND c.device_id = p.device_id
                    WHERE p.alarm IS NOT NULL AND d.hidden = 0 AND p.seq > coalesce(c.acked_seq, dst.start_seq)
                    """, then: "ORDER BY seq"))
            select.bind(1, destination)
            let alarms = try storedRowsWithDevice(select)
            // Few rows: a destination's alarms, at most one position per device per
            // `send.minIntervalSeconds` while a budget is spent, and for a round or two the
            // batches a gateway took behind one it refused.
            let ahead = try db.statement(
                Self.bothTables(
                    """
                    SELECT a.seq FROM alarm_sent a JOIN %TABLE p ON p.seq = a.seq
                    JOIN destinations dst ON dst.name = ?1
                    LEFT JOIN cursors c ON c.destination = ?1 AND c.device_id = p.device_id
                    WHERE a.destination = ?1 AND p.seq > coalesce(c.acked_seq, dst.start_seq)
                    """, then: ""))
            ahead.bind(1, destination)
            var sent = Set<Int64>()
            while try ahead.step() { sent.insert(ahead.int64(0)) }
            return (alarms.filter { !sent.contains($0.seq) }, sent)
        }
    }

    /// The oldest positions queued again for a destination (`georelay replay`).
    package func replayQueue(destination: String, limit: Int) throws(SpoolError) -> [StoredPosition] {
        try wrap {
            let select = try db.statement(
                Self.bothTables(
                    """
                    SELECT \(Self.columns(of: "p")), p.device_id, d.name
                    FROM replay_queue r JOIN %TABLE p ON p.seq = r.seq JOIN devices d ON d.id = p.device_id
                    WHERE r.destination = ?1
                    """, then: "ORDER BY device_id, fix_ms LIMIT ?2"))
            select.bind(1, destination)
            select.bind(2, limit)
            return try storedRowsWithDevice(select)
        }
    }

    /// The body encoding a destination settled on, if it recorded one.
    package func encoding(destination: String) throws(SpoolError) -> String? {
        try wrap {
            let select = try db.statement("SELECT encoding FROM destinations WHERE name = ?")
            select.bind(1, destination)
            return try select.step() ? select.text(0) : nil
        }
    }

    /// The diagnostic log, oldest first.
    package func logEntries(limit: Int = 10_000) throws(SpoolError) -> [LogEntry] {
        try wrap {
            let select = try db.statement(
                "SELECT time_ms, level, message FROM (SELECT * FROM log ORDER BY id DESC LIMIT ?) ORDER BY id")
            select.bind(1, limit)
            var entries: [LogEntry] = []
            while try select.step() {
                entries.append(
                    LogEntry(
                        timeMs: select.int64(0), level: LogLevel(rawValue: select.int(1)) ?? .info,
                        message: select.text(2) ?? ""))
            }
            return entries
        }
    }
}

@available(*, unavailable)
extension SpoolReader: Sendable {}

extension SpoolReader {
    /// Every device in the spool, by name.
    package func devices() throws(SpoolError) -> [(id: Int64, name: String)] {
        try wrap {
            let select = try db.statement("SELECT id, name FROM devices ORDER BY name")
            var rows: [(Int64, String)] = []
            while try select.step() { rows.append((select.int64(0), select.text(1) ?? "")) }
            return rows
        }
    }

    /// Streams a device's positions in fix-time order, one at a time, so an export
    /// of millions of positions holds one in memory. `body` returns false to stop.
    package func forEachPosition(
        deviceID: Int64, device: String, sinceMs: Int64?, untilMs: Int64?, _ body: (Position) throws -> Bool
    ) throws {
        try forEachStoredPosition(
            deviceID: deviceID, device: device, sinceMs: sinceMs ?? .min, untilMs: untilMs ?? .max
        ) {
            try body($0.position)
        }
    }
}

import Foundation
import GeoRelayCore

/// Storing positions: one row per device and fix time, resends answered with the stored seq.
extension SpoolWriter {
    func insert(_ positions: [Position], receivedMs: Int64, db: SQLiteDatabase, counters: inout GroupCounters) throws -> [AppendResult] {
        let insert = try db.statement(PositionRow.insertSQL)
        var results: [AppendResult] = []
        results.reserveCapacity(positions.count)
        var touched: [Int64: (seq: Int64, fixMs: Int64, count: Int)] = [:]
        for p in positions {
            let deviceID = try deviceID(for: p.device, db: db)
            if rejectingNew {
                if let existing = try existing(deviceID: deviceID, fixMs: p.timeMs, matching: p, db: db) {
                    results.append(existing)
                    counters.count(existing)
                } else {
                    results.append(.failed(.spoolFull("the spool is at its quota of \(settings.maxBytes) bytes and whenFull is reject")))
                    counters.add("ingest.rejected.spool-full", 1)
                }
                continue
            }
            PositionRow.bind(insert, deviceID: deviceID, position: p, receivedMs: receivedMs)
            // A plain INSERT, not ON CONFLICT DO NOTHING: a skipped insert would still
            // use up an AUTOINCREMENT value, leaving gaps in the seqs collectors see.
            if try insertNew(insert, db: db) {
                let seq = db.lastInsertRowID
                results.append(.stored(seq: seq))
                counters.stored += 1
                if p.alarm != nil { counters.alarms += 1 }
                let previous = touched[deviceID]
                touched[deviceID] = (seq, max(previous?.fixMs ?? .min, p.timeMs), (previous?.count ?? 0) + 1)
            } else if let existing = try existing(deviceID: deviceID, fixMs: p.timeMs, matching: p, db: db) {
                results.append(existing)
                counters.count(existing)
            } else {
                throw SQLiteError(code: 1, message: "insert neither stored nor found a row", sql: nil)
            }
        }
        let update = try db.statement("""
            UPDATE devices SET last_seq = max(last_seq, ?2), last_fix_ms = max(coalesce(last_fix_ms, ?3), ?3), last_received_ms = ?4,
                received = received + ?5
            WHERE id = ?1
            """)
        for (deviceID, last) in touched {
            update.reset()
            update.bind(1, deviceID)
            update.bind(2, last.seq)
            update.bind(3, last.fixMs)
            update.bind(4, receivedMs)
            update.bind(5, last.count)
            try update.run()
        }
        return results
    }

    /// Runs the insert; false when the device already has a position at that fix time.
    private func insertNew(_ insert: SQLiteStatement, db: SQLiteDatabase) throws -> Bool {
        do {
            try insert.run()
            return true
        } catch {
            if error.isUniqueViolation { return false }
            throw error
        }
    }

    private func existing(deviceID: Int64, fixMs: Int64, matching p: Position, db: SQLiteDatabase) throws -> AppendResult? {
        let select = try db.statement("SELECT seq, lat, lon FROM positions WHERE device_id = ? AND fix_ms = ?")
        select.bind(1, deviceID)
        select.bind(2, fixMs)
        guard try select.step() else { return nil }
        let seq = select.int64(0)
        let same = abs(select.double(1) - p.lat) < 1e-7 && abs(select.double(2) - p.lon) < 1e-7
        select.reset()
        return same ? .duplicate(seq: seq) : .conflict(seq: seq)
    }

    func deviceID(for name: String, db: SQLiteDatabase) throws -> Int64 {
        if let id = deviceIDs[name] { return id }
        let select = try db.statement("SELECT id FROM devices WHERE name = ?")
        select.bind(1, name)
        if try select.step() {
            let id = select.int64(0)
            select.reset()
            deviceIDs[name] = id
            return id
        }
        let insert = try db.statement("INSERT INTO devices(name, hidden) VALUES(?, ?)")
        insert.bind(1, name)
        insert.bind(2, sourceDevices.contains(name))
        try insert.run()
        let id = db.lastInsertRowID
        deviceIDs[name] = id
        return id
    }

}

/// A position's row: the insert the writer uses, shared with the benchmark's
/// limit so both measure the same statement.
package enum PositionRow {
    package static let insertSQL = """
        INSERT INTO positions(device_id, fix_ms, received_ms, lat, lon, speed, course, altitude, accuracy, battery, charging, alarm, attributes)
        VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    package static func bind(_ insert: SQLiteStatement, deviceID: Int64, position p: Position, receivedMs: Int64) {
        insert.reset()
        insert.bind(1, deviceID)
        insert.bind(2, p.timeMs)
        insert.bind(3, receivedMs)
        insert.bind(4, p.lat)
        insert.bind(5, p.lon)
        insert.bind(6, p.speed)
        insert.bind(7, p.course)
        insert.bind(8, p.altitude)
        insert.bind(9, p.accuracy)
        insert.bind(10, p.battery)
        insert.bind(11, p.charging)
        insert.bind(12, p.alarm)
        insert.bind(13, p.attributes.isEmpty ? nil : p.attributes.jsonText)
    }
}

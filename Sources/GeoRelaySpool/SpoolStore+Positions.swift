import GeoRelayCore
import Glibc

/// Storing positions: one row per device and fix time, resends answered with the stored seq.
/// Rows land in `recent`; `RecentPositions` moves them into `positions`.
extension SpoolStore {
    func insert(
        _ positions: [Position], receivedMs: Int64, recent: inout RecentPositions,
        counters: inout GroupCounters
    ) throws -> [AppendResult] {
        let insert = try db.statement(PositionRow.insertSQL)
        var results: [AppendResult] = []
        results.reserveCapacity(positions.count)
        for p in positions {
            let deviceID = try deviceID(for: p.device)
            if let stored = try recent.find(deviceID: deviceID, fixMs: p.timeMs, db: db) {
                let same = abs(stored.lat - p.lat) < 1e-7 && abs(stored.lon - p.lon) < 1e-7
                let result: AppendResult = same ? .duplicate(seq: stored.seq) : .conflict(seq: stored.seq)
                results.append(result)
                counters.count(result)
                continue
            }
            if rejectingNew {
                // Counted by the door that asked (the socket's loop, the phone port), as every refusal is.
                results.append(
                    .failed(
                        .spoolFull("the spool is at its quota of \(settings.maxBytes) bytes and whenFull is reject")))
                continue
            }
            let p = try withOdometer(p, deviceID: deviceID)
            // A full ring is merged in this transaction before its oldest slot is taken again.
            if recent.isFull { try merge(&recent, nowNs: settings.clock.monotonicNs(), counters: &counters) }
            // The seq is the writer's to give (see `RecentPositions`): a failed group leaves no gap
            // because the writer reads `recent` back after a rollback.
            let (seq, slot) = recent.add(deviceID: deviceID, fixMs: p.timeMs, lat: p.lat, lon: p.lon)
            PositionRow.bind(insert, seq: seq, slot: slot, deviceID: deviceID, position: p, receivedMs: receivedMs)
            try insert.run()
            // A slot that is not there, or not free, would drop a position without an error: fail the group.
            guard db.changes == 1 else {
                throw SpoolError.incompatible("slot \(slot) of the ring of recent positions is not free for seq \(seq)")
            }
            results.append(.stored(seq: seq))
            counters.stored += 1
            if p.alarm != nil { counters.alarms += 1 }
        }
        return results
    }

    func deviceID(for name: String) throws -> Int64 {
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

/// A position's row: the write the writer uses, shared with the benchmark's
/// limit so both measure the same statement. New rows go into a slot of the ring behind
/// `recent`, rewritten in place (see `RecentPositions`). Only a free slot (merged) is
/// written: if the writer's memory of the ring were ever wrong, the write changes no row and
/// the group fails, instead of overwriting a position that was answered `ok`.
package enum PositionRow {
    package static let insertSQL = """
        UPDATE recent_slots SET seq = ?1, device_id = ?2, fix_ms = ?3, received_ms = ?4, lat = ?5, lon = ?6, speed = ?7,
            course = ?8, altitude = ?9, accuracy = ?10, battery = ?11, charging = ?12, alarm = ?13, attributes = ?14,
            odometer = ?16
        WHERE slot = ?15 AND seq <= (SELECT seq FROM recent_merged)
        """

    package static func bind(
        _ insert: SQLiteStatement, seq: Int64, slot: Int64, deviceID: Int64, position p: Position, receivedMs: Int64
    ) {
        insert.reset()
        insert.bind(15, slot)
        insert.bind(1, seq)
        insert.bind(2, deviceID)
        insert.bind(3, p.timeMs)
        insert.bind(4, receivedMs)
        insert.bind(5, p.lat)
        insert.bind(6, p.lon)
        insert.bind(7, p.speed)
        insert.bind(8, p.course)
        insert.bind(9, p.altitude)
        insert.bind(10, p.accuracy)
        insert.bind(11, p.battery)
        insert.bind(12, p.charging)
        insert.bind(13, p.alarm)
        insert.bind(14, p.attributes.isEmpty ? nil : p.attributes.jsonText)
        insert.bind(16, p.odometer)
    }
}

import GeoRelayCore

/// The facade's own writes (`Spool`): the destinations the configuration names, the devices
/// that are only sources, the replay queue, the log's clearing. Each runs as an operation in
/// one of the writer's groups.
extension SpoolStore {
    /// Makes the destination table match `destinations`: a new destination starts after the
    /// newest stored position; a removed one loses its delivery state; the others are untouched.
    func register(destinations: [DestinationRegistration]) throws {
        let next = try db.statement(
            "SELECT max(coalesce((SELECT max(seq) FROM positions), 0), coalesce((SELECT max(seq) FROM recent), 0))")
        _ = try next.step()
        let newest = next.int64(0)
        // A destination new to the spool has passed every device's positions so far: a cursor
        // each, settled at what the device has stored (see `cursors.settled`).
        let known = try db.statement("SELECT 1 FROM destinations WHERE name = ?")
        let settle = try db.statement(
            """
            INSERT OR IGNORE INTO cursors(destination, device_id, acked_seq, settled)
            SELECT ?1, id, ?2, received FROM device_totals
            """)
        for destination in destinations {
            known.reset()
            known.bind(1, destination.name)
            guard try !known.step() else { continue }
            try settle.run(with: destination.name, newest)
        }
        let upsert = try db.statement(
            """
            INSERT INTO destinations(name, start_seq, buffered) VALUES(?, ?, ?)
            ON CONFLICT(name) DO UPDATE SET buffered = excluded.buffered
            """)
        for destination in destinations {
            try upsert.run(with: destination.name, newest, destination.buffered)
        }
        let names = destinations.map { "'\($0.name.replacing("'", with: "''"))'" }.joined(separator: ",")
        let keep = names.isEmpty ? "" : "WHERE name NOT IN (\(names))"
        let keepOther = names.isEmpty ? "" : "WHERE destination NOT IN (\(names))"
        try db.execute(
            """
            DELETE FROM destinations \(keep); DELETE FROM cursors \(keepOther); DELETE FROM quarantine \(keepOther);
            DELETE FROM filter_state \(keepOther); DELETE FROM alarm_sent \(keepOther); DELETE FROM replay_queue \(keepOther);
            """)
    }

    /// Marks the source receivers of multi-source devices, in a transaction of its own.
    func setSourceDevices(_ names: Set<String>) throws {
        sourceDevices = names
        try db.transaction {
            try db.execute("UPDATE devices SET hidden = 0")
            let mark = try db.statement("UPDATE devices SET hidden = 1 WHERE name = ?")
            for name in names {
                try mark.run(with: name)
            }
        }
    }

    /// Queues stored positions for `destination` again; the number newly queued.
    func queueReplay(destination: String, seqs: [Int64]) throws -> Int {
        let known = try db.statement("SELECT 1 FROM destinations WHERE name = ?")
        known.bind(1, destination)
        guard try known.step() else {
            throw SpoolError.notFound("the spool has no destination \(destination) (has the relay run with it?)")
        }
        known.reset()
        let insert = try db.statement("INSERT OR IGNORE INTO replay_queue(destination, seq) VALUES(?, ?)")
        var count = 0
        for seq in seqs {
            try insert.run(with: destination, seq)
            count += db.changes
        }
        return count
    }

    func clearLog() throws {
        try db.execute("DELETE FROM log")
    }
}

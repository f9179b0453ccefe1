import GeoRelayCore

/// Applying a destination's progress: cursors, quarantine, parked devices, counters and state.
extension SpoolStore {
    func apply(_ update: DeliveryUpdate) throws {
        // The positions a cursor passes are counted as it passes them (`settled`), so status
        // knows what is pending without counting the backlog: one index range per advance.
        let ack = try db.statement(
            """
            INSERT INTO cursors(destination, device_id, acked_seq, settled)
            VALUES(?1, ?2, ?3, (SELECT count(*) FROM (\(SpoolReader.bothTables("""
                SELECT seq FROM %TABLE WHERE device_id = ?2 AND seq <= ?3 AND seq > coalesce(
                    (SELECT acked_seq FROM cursors WHERE destination = ?1 AND device_id = ?2),
                    (SELECT start_seq FROM destinations WHERE name = ?1), 0)
                """, then: "")))))
            ON CONFLICT(destination, device_id) DO UPDATE SET settled = settled + excluded.settled, acked_seq = max(acked_seq, excluded.acked_seq)
            """)
        // Acknowledged and quarantined positions both move the cursor; one upsert per device.
        var advanced: [Int64: Int64] = [:]
        for (deviceID, seq) in update.acknowledged { advanced[deviceID] = max(advanced[deviceID] ?? 0, seq) }
        for (deviceID, seq, _) in update.quarantined { advanced[deviceID] = max(advanced[deviceID] ?? 0, seq) }
        for (deviceID, seq) in advanced {
            try ack.run(with: update.destination, deviceID, seq)
        }
        if !update.quarantined.isEmpty || !update.quarantinedUnreached.isEmpty {
            let quarantine = try db.statement(
                "INSERT OR REPLACE INTO quarantine(destination, seq, time_ms, reason) VALUES(?, ?, ?, ?)")
            let now = settings.clock.nowMs()
            for (seq, reason) in update.quarantined.map({ ($0.seq, $0.reason) }) + update.quarantinedUnreached {
                try quarantine.run(with: update.destination, seq, now, reason)
            }
        }
        if !update.parked.isEmpty {
            let park = try db.statement(
                """
                INSERT INTO cursors(destination, device_id, acked_seq, parked_until_ms, parked_reason)
                VALUES(?1, ?2, coalesce((SELECT start_seq FROM destinations WHERE name = ?1), 0), ?3, ?4)
                ON CONFLICT(destination, device_id) DO UPDATE SET parked_until_ms = excluded.parked_until_ms, parked_reason = excluded.parked_reason
                """)
            for (deviceID, until, reason) in update.parked {
                try park.run(with: update.destination, deviceID, until, reason)
            }
        }
        if !update.filterStates.isEmpty {
            let upsert = try db.statement(
                """
                INSERT OR REPLACE INTO filter_state(destination, device_id, last_sent_ms, last_sent_lat, last_sent_lon, last_sent_course,
                    newest_sent_ms, anchor_lat, anchor_lon, anchor_since_ms, stopped, last_sent_odometer, newest_sent_odometer)
                VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            // The last state per device is the one that holds; one upsert per device.
            var latest: [Int64: FilterState] = [:]
            for (deviceID, state) in update.filterStates { latest[deviceID] = state }
            for (deviceID, state) in latest {
                try upsert.run(
                    with: update.destination, deviceID, state.lastSentMs, state.lastSentLat, state.lastSentLon,
                    state.lastSentCourse,
                    state.newestSentMs, state.anchorLat, state.anchorLon, state.anchorSinceMs, state.stopped,
                    state.lastSentOdometer, state.newestSentOdometer)
            }
        }
        if !update.sentAhead.isEmpty {
            let insert = try db.statement("INSERT OR IGNORE INTO alarm_sent(destination, seq) VALUES(?, ?)")
            for seq in update.sentAhead {
                try insert.run(with: update.destination, seq)
            }
        }
        if !update.replayed.isEmpty {
            let done = try db.statement("DELETE FROM replay_queue WHERE destination = ? AND seq = ?")
            for seq in update.replayed {
                try done.run(with: update.destination, seq)
            }
        }
        if let encoding = update.encoding {
            let statement = try db.statement("UPDATE destinations SET encoding = ? WHERE name = ?")
            statement.bind(1, encoding)
            statement.bind(2, update.destination)
            try statement.run()
        }
        if update.wireBytes > 0 {
            let daily = try db.statement(
                """
                INSERT INTO wire_daily(destination, day, bytes) VALUES(?, ?, ?)
                ON CONFLICT(destination, day) DO UPDATE SET bytes = bytes + excluded.bytes
                """)
            daily.bind(1, update.destination)
            daily.bind(2, String(Timestamp.iso8601(milliseconds: settings.clock.nowMs()).prefix(10)))
            daily.bind(3, update.wireBytes)
            try daily.run()
        }
        if update.sent > 0 { try recordRate(update.destination, sent: update.sent) }
        if update.sent != 0 || update.wireBytes != 0 || update.state != nil {
            let state = try db.statement(
                """
                UPDATE destinations SET sent = sent + ?2, wire_bytes = wire_bytes + ?3, updated_ms = ?4,
                    behind_newer = behind_newer + ?9,
                    state = coalesce(?5, state),
                    last_error = CASE WHEN ?5 IS NULL THEN last_error ELSE ?6 END,
                    next_attempt_ms = CASE WHEN ?5 IS NULL THEN next_attempt_ms ELSE ?7 END,
                    last_success_ms = coalesce(?8, last_success_ms)
                WHERE name = ?1
                """)
            state.bind(1, update.destination)
            state.bind(2, update.sent)
            state.bind(3, update.wireBytes)
            state.bind(4, settings.clock.nowMs())
            state.bind(5, update.state?.state.rawValue)
            state.bind(6, update.state?.lastError)
            state.bind(7, update.state?.nextAttemptMs)
            state.bind(8, update.state?.lastSuccessMs)
            state.bind(9, update.behindNewer)
            try state.run()
        }
    }

    /// Positions per second over windows of about ten seconds, kept in the spool for status.
    private func recordRate(_ destination: String, sent: Int) throws {
        let now = settings.clock.nowMs()
        var window = rateWindows[destination] ?? (startMs: now, count: 0)
        window.count += sent
        if now - window.startMs >= 10_000 {
            let rate = Double(window.count) / (Double(now - window.startMs) / 1000)
            let statement = try db.statement(
                "UPDATE destinations SET send_rate = ?, rate_updated_ms = ? WHERE name = ?")
            statement.bind(1, rate)
            statement.bind(2, now)
            statement.bind(3, destination)
            try statement.run()
            window = (now, 0)
        }
        rateWindows[destination] = window
    }
}

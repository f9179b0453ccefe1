import GeoRelayCore

extension SpoolReader {
    /// Streams a device's positions with a fix time in `sinceMs...untilMs`, in fix-time order,
    /// each with its seq, one at a time: what `georelay replay` decides over (a destination's
    /// filter sees whole positions, alarms and attributes included) before the writer queues
    /// the seqs it chose. `body` returns false to stop.
    ///
    /// `forEachPosition` (the export's stream) in the same order, with the seq a replay queue needs.
    package func forEachStoredPosition(
        deviceID: Int64, device: String, sinceMs: Int64, untilMs: Int64,
        _ body: (StoredPosition) throws -> Bool
    ) throws {
        defer { db.resetStatements() }
        let select = try db.statement(
            Self.bothTables(
                """
                SELECT \(Self.columns) FROM %TABLE WHERE device_id = ?1 AND fix_ms >= ?2 AND fix_ms <= ?3
                """, then: "ORDER BY fix_ms"))
        select.bind(1, deviceID)
        select.bind(2, sinceMs)
        select.bind(3, untilMs)
        while try select.step() {
            let stored = StoredPosition(
                seq: select.int64(0), deviceID: deviceID, receivedMs: select.int64(1),
                position: Self.readPosition(select, device: device))
            if try !body(stored) { break }
        }
    }
}

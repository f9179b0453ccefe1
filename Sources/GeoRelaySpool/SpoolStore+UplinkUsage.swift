import GeoRelayCore

/// Wire bytes an uplink carried on one UTC day, as the forwarding side attributed them (each
/// destination's bytes to the uplink its route took at the time).
package struct UplinkUsage: Sendable, Equatable {
    package var uplink: String
    /// `YYYY-MM-DD`, UTC: budgets roll over at UTC midnight and on the first of the month.
    package var day: String
    package var bytes: Int64

    package init(uplink: String, day: String, bytes: Int64) {
        self.uplink = uplink
        self.day = day
        self.bytes = bytes
    }

    /// Days kept: this month and the whole of the last one, whatever the month's length.
    package static let keptDays = 62
}

/// Usage is held state, written with the next acknowledgements (no commit of its own), and
/// its table stays bounded in the transaction that grows it.
extension SpoolStore {
    func insert(_ usage: [UplinkUsage]) throws {
        let upsert = try db.statement(
            """
            INSERT INTO uplink_daily(uplink, day, bytes) VALUES(?, ?, ?)
            ON CONFLICT(uplink, day) DO UPDATE SET bytes = bytes + excluded.bytes
            """)
        for entry in usage where entry.bytes > 0 {
            try upsert.run(with: entry.uplink, entry.day, entry.bytes)
        }
        guard let newest = usage.map(\.day).max() else { return }
        let expired = try db.statement(
            """
            DELETE FROM uplink_daily WHERE day NOT IN (SELECT day FROM uplink_daily GROUP BY day ORDER BY day DESC LIMIT ?)
                OR day > ?
            """)
        // A day "from the future" is a clock that was set back: it would hide today's.
        try expired.run(with: Int64(UplinkUsage.keptDays), newest)
    }
}

extension SpoolReader {
    /// Per uplink, the bytes of `day` and of the month `day` falls in (both UTC).
    package func uplinkUsage(day: String) throws(SpoolError) -> [String: (today: Int64, month: Int64)] {
        try wrap {
            let select = try db.statement(
                """
                SELECT uplink, coalesce(sum(CASE WHEN day = ?1 THEN bytes END), 0), sum(bytes)
                FROM uplink_daily WHERE substr(day, 1, 7) = substr(?1, 1, 7) GROUP BY uplink
                """)
            select.bind(1, day)
            var usage: [String: (today: Int64, month: Int64)] = [:]
            while try select.step() {
                usage[select.text(0) ?? ""] = (select.int64(1), select.int64(2))
            }
            return usage
        }
    }
}

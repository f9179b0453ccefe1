import CSQLite

/// A failed SQLite call: the extended result code, SQLite's message and the SQL.
package struct SQLiteError: Error, Sendable, CustomStringConvertible {
    package let code: Int32
    package let message: String
    package let sql: String?

    /// The primary result code (`SQLITE_FULL`, `SQLITE_IOERR`, …) without the extended bits.
    package var primaryCode: Int32 { code & 0xFF }

    /// The disk or the quota is full: ingest answers `spool-full`.
    package var isFull: Bool { primaryCode == SQLITE_FULL }
    /// SQLITE_CONSTRAINT_UNIQUE, a macro Swift cannot import.
    package var isUniqueViolation: Bool { code == SQLITE_CONSTRAINT | (8 << 8) }
    package var isBusy: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }

    package var description: String {
        var text = "SQLite error \(code): \(message)"
        if let sql { text += " (in: \(sql.prefix(120)))" }
        return text
    }
}

/// The one place SQLite status codes become Swift errors.
@discardableResult
func check(_ code: Int32, _ db: OpaquePointer?, sql: String? = nil) throws(SQLiteError) -> Int32 {
    switch code {
    case SQLITE_OK, SQLITE_ROW, SQLITE_DONE:
        return code
    default:
        let message =
            db.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(code))
        let extended = db.map { sqlite3_extended_errcode($0) } ?? code
        throw SQLiteError(code: extended, message: message, sql: sql)
    }
}

import CSQLite

/// Owns one SQLite connection.
///
/// Not thread-safe and not `Sendable`: each connection lives on one serial
/// queue (the spool writer's, or one reader's), as GRDB does.
package final class SQLiteDatabase {
    /// Only this module's statements reach the connection's C handle.
    let handle: OpaquePointer
    package let path: String
    private var statements: [String: SQLiteStatement] = [:]

    package init(path: String, readOnly: Bool = false) throws(SQLiteError) {
        var db: OpaquePointer?
        let flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            if let db { sqlite3_close_v2(db) }
            throw SQLiteError(code: rc, message: "\(message): \(path)", sql: nil)
        }
        handle = db
        self.path = path
        sqlite3_extended_result_codes(db, 1)
        // Readers and the writer share the file; a short wait beats a spurious SQLITE_BUSY.
        sqlite3_busy_timeout(db, 5000)
    }

    deinit {
        statements.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Runs SQL that returns no rows (may hold several statements).
    package func execute(_ sql: String) throws(SQLiteError) {
        try check(sqlite3_exec(handle, sql, nil, nil, nil), handle, sql: sql)
    }

    /// A prepared statement, cached for the connection's lifetime.
    package func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        if let cached = statements[sql] {
            cached.reset()
            return cached
        }
        let statement = try SQLiteStatement(database: self, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// Resets every cached statement. A statement left mid-result keeps its
    /// read transaction open, and with it an old snapshot: readers call this
    /// after each operation so the next one sees the latest commit.
    package func resetStatements() {
        for statement in statements.values { statement.reset() }
    }

    /// Runs a PRAGMA and returns the first column of its first row, as text.
    @discardableResult
    package func pragma(_ text: String) throws(SQLiteError) -> String? {
        let statement = try SQLiteStatement(database: self, sql: "PRAGMA \(text)")
        return try statement.step() ? statement.text(0) : nil
    }

    /// Runs `body` in an immediate transaction: committed if it returns, rolled back if it throws.
    package func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }

    package var changes: Int { Int(sqlite3_changes(handle)) }
    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
    package var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }
}

@available(*, unavailable)
extension SQLiteDatabase: Sendable {}

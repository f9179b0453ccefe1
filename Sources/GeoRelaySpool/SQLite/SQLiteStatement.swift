import CSQLite

/// Owns one prepared statement.
package final class SQLiteStatement {
    private let handle: OpaquePointer
    private unowned let database: SQLiteDatabase
    let sql: String
    /// The first reset or bind that failed since the last reset (a parameter index out of range,
    /// a text too big): resets and binds stay non-throwing for the writer's per-position loop,
    /// and the next `step()` throws it through `check()` instead of running the statement with
    /// a parameter left NULL.
    private var pendingFailure: (code: Int32, what: String)?

    init(database: SQLiteDatabase, sql: String) throws(SQLiteError) {
        var statement: OpaquePointer?
        try check(
            sqlite3_prepare_v3(database.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil),
            database.handle, sql: sql)
        guard let statement else { throw SQLiteError(code: SQLITE_MISUSE, message: "empty statement", sql: sql) }
        self.handle = statement
        self.database = database
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    /// Ready for new bindings.
    ///
    /// `sqlite3_reset` repeats the error of a failed step; `step()` has thrown that one and
    /// reset the statement at once, so what a reset here reports is news, and the next step
    /// throws it.
    package func reset() {
        pendingFailure = nil
        failed(sqlite3_reset(handle), "reset of \(sql)")
        failed(sqlite3_clear_bindings(handle), "clearing the parameters of \(sql)")
    }

    private func failed(_ rc: Int32, _ what: @autoclosure () -> String) {
        if rc != SQLITE_OK, pendingFailure == nil { pendingFailure = (rc, what()) }
    }

    private func bound(_ rc: Int32, _ index: Int32) {
        failed(rc, "parameter \(index) of \(sql)")
    }

    // MARK: Binding (1-based, as SQLite counts)

    package func bind(_ index: Int32, _ value: Int64?) {
        bound(value.map { sqlite3_bind_int64(handle, index, $0) } ?? sqlite3_bind_null(handle, index), index)
    }

    package func bind(_ index: Int32, _ value: Int?) { bind(index, value.map(Int64.init)) }

    package func bind(_ index: Int32, _ value: Double?) {
        bound(value.map { sqlite3_bind_double(handle, index, $0) } ?? sqlite3_bind_null(handle, index), index)
    }

    package func bind(_ index: Int32, _ value: String?) {
        guard let value else {
            bound(sqlite3_bind_null(handle, index), index)
            return
        }
        // SQLITE_TRANSIENT: SQLite copies the text before this returns.
        let rc = value.withCString { chars in
            georelay_sqlite3_bind_text_transient(handle, index, chars, Int32(value.utf8.count))
        }
        bound(rc, index)
    }

    package func bind(_ index: Int32, _ value: Bool?) { bind(index, value.map { $0 ? Int64(1) : Int64(0) }) }

    /// Resets, binds `values` to parameters 1, 2, … and runs: one row of a multi-row write.
    /// (The ingest insert binds by hand: it runs per position, where boxing each value costs.)
    package func run(with values: any SQLiteBindable...) throws(SQLiteError) {
        reset()
        for (offset, value) in values.enumerated() { value.bind(to: self, at: Int32(offset + 1)) }
        try run()
    }

    // MARK: Stepping

    /// Advances to the next row; `false` when done.
    @discardableResult
    package func step() throws(SQLiteError) -> Bool {
        if let failure = pendingFailure {
            pendingFailure = nil
            try check(failure.code, nil, sql: failure.what)
        }
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        // The error thrown below is the one this reset answers again; resetting now leaves the
        // statement clean, so a later reset() reports only something new.
        let error = Result { () throws(SQLiteError) in try check(rc, database.handle, sql: sql) }
        sqlite3_reset(handle)
        _ = try error.get()
        return false
    }

    /// Runs a statement that returns no rows.
    package func run() throws(SQLiteError) {
        while try step() {}
    }

    // MARK: Columns (0-based)

    /// Columns in each result row.
    package var columnCount: Int32 { sqlite3_column_count(handle) }

    package func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    package func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    package func int(_ column: Int32) -> Int { Int(sqlite3_column_int64(handle, column)) }
    package func double(_ column: Int32) -> Double { sqlite3_column_double(handle, column) }
    package func optionalDouble(_ column: Int32) -> Double? { isNull(column) ? nil : double(column) }
    package func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }

    package func text(_ column: Int32) -> String? {
        guard let pointer = sqlite3_column_text(handle, column) else { return nil }
        return String(cString: pointer)
    }
}

@available(*, unavailable)
extension SQLiteStatement: Sendable {}

/// A Swift value that binds to a statement parameter; an Optional binds NULL when nil.
package protocol SQLiteBindable {
    func bind(to statement: SQLiteStatement, at index: Int32)
}

extension Int64: SQLiteBindable {
    package func bind(to statement: SQLiteStatement, at index: Int32) { statement.bind(index, self) }
}

extension Int: SQLiteBindable {
    package func bind(to statement: SQLiteStatement, at index: Int32) { statement.bind(index, self) }
}

extension Double: SQLiteBindable {
    package func bind(to statement: SQLiteStatement, at index: Int32) { statement.bind(index, self) }
}

extension String: SQLiteBindable {
    package func bind(to statement: SQLiteStatement, at index: Int32) { statement.bind(index, self) }
}

extension Bool: SQLiteBindable {
    package func bind(to statement: SQLiteStatement, at index: Int32) { statement.bind(index, self) }
}

extension Optional: SQLiteBindable where Wrapped: SQLiteBindable {
    package func bind(to statement: SQLiteStatement, at index: Int32) {
        if let self { self.bind(to: statement, at: index) } else { statement.bind(index, nil as Int64?) }
    }
}

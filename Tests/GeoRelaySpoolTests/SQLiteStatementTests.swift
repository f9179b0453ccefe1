import Foundation
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// Resets go through the one `check()`: a failed step is thrown once, by the step, and the
/// reset that follows it does not throw it again at the next, well-formed step.
@Suite(.offThePool) struct SQLiteStatementResetTests {
    @Test func aFailedStepIsThrownOnceNotAgainAfterTheReset() throws {
        let fixture = SpoolFixture()
        let db = try SQLiteDatabase(path: fixture.directory + "/r.db")
        try db.execute("CREATE TABLE t(a INTEGER UNIQUE)")
        let insert = try db.statement("INSERT INTO t(a) VALUES(?)")
        try insert.run(with: Int64(1))
        let error = #expect(throws: SQLiteError.self) { try insert.run(with: Int64(1)) }
        #expect(error?.isUniqueViolation == true, "\(error.map { "\($0)" } ?? "no error")")
        // run(with:) resets first; a reset that answered the old error again would fail this insert.
        try insert.run(with: Int64(2))
        // So does the cache's reset when the statement is asked for again.
        let again = try db.statement("INSERT INTO t(a) VALUES(?)")
        again.bind(1, Int64(3))
        try again.run()
        let count = try db.statement("SELECT count(*) FROM t")
        _ = try count.step()
        #expect(count.int64(0) == 3)
    }

    @Test func aResetMidResultLeavesTheNextStepClean() throws {
        let fixture = SpoolFixture()
        let db = try SQLiteDatabase(path: fixture.directory + "/m.db")
        try db.execute("CREATE TABLE t(a INTEGER); INSERT INTO t VALUES (1), (2), (3)")
        let select = try db.statement("SELECT a FROM t ORDER BY a")
        #expect(try select.step() && select.int64(0) == 1)
        select.reset()
        #expect(try select.step() && select.int64(0) == 1, "a reset rewinds, and says nothing went wrong")
    }
}

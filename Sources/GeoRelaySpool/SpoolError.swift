/// Why the spool could not be opened or written.
package struct SpoolError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, for code that must tell failures apart (as GRDB's `ResultCode` does);
    /// `description` says it for people, with the path and what to do.
    package enum Code: Sendable, Equatable {
        /// SQLite failed underneath: `underlying` has its result code and message.
        case storage
        /// The file is not one this relay can use as it is: an older schema a reader cannot
        /// migrate, a setting SQLite refused, a ring of recent positions out of shape.
        case incompatible
        /// Written by a newer relay (its schema version): install that again, or move it aside.
        case newerSchema(Int)
        /// No spool at the path, or no such destination in it.
        case notFound
        /// The spool was closed, or a write could not be taken: the job did not run.
        case notWritten
    }

    package let code: Code
    package let description: String
    /// The SQLite failure underneath, when there is one.
    package let underlying: SQLiteError?

    package static func storage(_ error: SQLiteError) -> SpoolError {
        SpoolError(code: .storage, description: error.description, underlying: error)
    }

    package static func incompatible(_ message: String) -> SpoolError {
        SpoolError(code: .incompatible, description: message, underlying: nil)
    }

    package static func newerSchema(_ version: Int, path: String) -> SpoolError {
        SpoolError(
            code: .newerSchema(version), description: Schema.newerSpool(path: path, version: version), underlying: nil)
    }

    package static func notFound(_ message: String) -> SpoolError {
        SpoolError(code: .notFound, description: message, underlying: nil)
    }

    package static func notWritten(_ message: String) -> SpoolError {
        SpoolError(code: .notWritten, description: message, underlying: nil)
    }
}

extension SpoolError {
    /// Runs `body`, turning whatever it throws into a `SpoolError`: the one
    /// place the spool's public surface maps SQLite failures.
    static func wrapping<T>(_ body: () throws -> T) throws(SpoolError) -> T {
        do {
            return try body()
        } catch let error as SpoolError {
            throw error
        } catch let error as SQLiteError {
            throw .storage(error)
        } catch {
            throw .incompatible("\(error)")
        }
    }
}

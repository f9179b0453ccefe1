/// Why the spool could not be opened or written.
package struct SpoolError: Error, Sendable, CustomStringConvertible {
    package let description: String
    /// The SQLite failure underneath, when there is one.
    package let underlying: SQLiteError?

    package static func storage(_ error: SQLiteError) -> SpoolError {
        SpoolError(description: error.description, underlying: error)
    }

    package static func incompatible(_ message: String) -> SpoolError {
        SpoolError(description: message, underlying: nil)
    }

    package static func notFound(_ message: String) -> SpoolError {
        SpoolError(description: message, underlying: nil)
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

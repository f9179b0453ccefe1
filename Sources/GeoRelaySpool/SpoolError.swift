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

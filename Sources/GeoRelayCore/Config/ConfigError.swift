/// A configuration problem, named by the key path it was found at
/// (`destinations[0].url: expected a string`).
package struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The key path, `spool.maxBytes` or `destinations[1].name`; empty for the file as a whole.
    package var path: String
    package var message: String

    package init(path: String, _ message: String) {
        self.path = path
        self.message = message
    }

    package var description: String { path.isEmpty ? message : "\(path): \(message)" }
}

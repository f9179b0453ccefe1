import FoundationEssentials
import Glibc

/// A credential that may live in the config, an environment variable or a file.
///
/// Its description never shows the value, only where it comes from, so a
/// `Secret` can be printed, logged or put in an error without leaking.
/// A file secret is read at each `reveal()`, so another program may renew it.
package struct Secret: Sendable, Equatable, CustomStringConvertible {
    package enum Source: Sendable, Equatable {
        case literal(String)
        case environment(String)
        case file(String)
    }

    package let source: Source
    /// The key path it was configured at, for error messages.
    package let path: String

    package init(_ source: Source, path: String) {
        self.source = source
        self.path = path
    }

    /// The value, trimmed of surrounding whitespace and newlines.
    package func reveal() throws(ConfigError) -> String {
        let raw: String
        switch source {
        case .literal(let value):
            raw = value
        case .environment(let name):
            guard let value = ProcessInfo.processInfo.environment[name] else {
                throw ConfigError(path: path, "environment variable \(name) is not set")
            }
            raw = value
        case .file(let file):
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ConfigError(path: path, "cannot read secret file \(file)")
            }
            raw = String(decoding: data, as: UTF8.self)
        }
        let value = raw.trimmingWhitespace
        if value.isEmpty { throw ConfigError(path: path, "is empty") }
        return value
    }

    package var description: String {
        switch source {
        case .literal: "<secret>"
        case .environment(let name): "<secret from env \(name)>"
        case .file(let file): "<secret from file \(file)>"
        }
    }
}

import FoundationEssentials
import Glibc

/// Keeps credentials out of log lines, status output and error messages.
package enum Redaction {
    /// The URL with any user information and query string replaced, so that
    /// `https://user:pass@host/path?key=...` prints as `https://***@host/path?***`.
    package static func url(_ text: String) -> String {
        guard var components = URLComponents(string: text) else { return "<unparseable URL>" }
        if components.user != nil || components.password != nil {
            components.user = "***"
            components.password = nil
        }
        if components.query != nil { components.query = "***" }
        return components.string ?? "<unparseable URL>"
    }
}

/// Why ingest rejected a line: the `err <code> <message>` reply.
///
/// A struct over a private code enum, so that adding a code never breaks a
/// caller, and `code` is a short bounded string safe for status counters.
package struct IngestError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: String, Sendable {
        case parse, range, time, device
        case tooLong = "too-long"
        case spoolFull = "spool-full"
        case `internal`, unsupported, checksum
    }

    private let _code: Code
    /// A human explanation of what was wrong and where. Never holds secrets.
    package let message: String

    /// The device whose fix came without a time (a `time` rejection), for the health check
    /// that names such receivers; nil for every other rejection.
    package private(set) var untimedDevice: String?

    private init(_ code: Code, _ message: String) {
        self._code = code
        self.message = message
    }

    /// The reply code: `parse`, `range`, `time`, `device`, `too-long`, `spool-full`, `internal`, `unsupported`, `checksum`.
    package var code: String { _code.rawValue }

    package static func parse(_ message: String) -> IngestError { IngestError(.parse, message) }
    package static func range(_ message: String) -> IngestError { IngestError(.range, message) }
    package static func time(_ message: String) -> IngestError { IngestError(.time, message) }
    /// `time missing time` for a fix of `device` that carries no time (a receiver without one
    /// yet, which gpsd reports as it gets them).
    package static func missingTime(device: String) -> IngestError {
        var error = IngestError(.time, "missing time")
        error.untimedDevice = device
        return error
    }
    package static func device(_ message: String) -> IngestError { IngestError(.device, message) }
    package static func tooLong(_ message: String) -> IngestError { IngestError(.tooLong, message) }
    package static func spoolFull(_ message: String) -> IngestError { IngestError(.spoolFull, message) }
    package static func `internal`(_ message: String) -> IngestError { IngestError(.internal, message) }
    package static func unsupported(_ message: String) -> IngestError { IngestError(.unsupported, message) }
    package static func checksum(_ message: String) -> IngestError { IngestError(.checksum, message) }

    /// Every code, for status tables that list zero counts too.
    package static let allCodes = [
        "parse", "range", "time", "device", "too-long", "spool-full", "internal", "unsupported", "checksum",
    ]

    package var description: String { "\(code) \(message)" }
}

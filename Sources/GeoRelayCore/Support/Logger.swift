import FoundationEssentials
import Glibc

/// Severity of a log event, numbered as syslog and journald number them.
package enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case error = 3
    case warning = 4
    case notice = 5
    case info = 6
    case debug = 7

    package var name: String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }

    package static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// One event of the diagnostic log.
package struct LogEntry: Sendable, Equatable {
    package var timeMs: Int64
    package var level: LogLevel
    package var message: String

    package init(timeMs: Int64, level: LogLevel, message: String) {
        self.timeMs = timeMs
        self.level = level
        self.message = message
    }
}

/// Somewhere log entries go: standard error, the spool's diagnostic log, a test's buffer.
package protocol LogSink: Sendable {
    func record(_ entry: LogEntry)
}

/// A cheap, copyable handle for logging with a label ("ingest", "forward[traccar]").
///
/// - Important: messages must never contain secrets; callers pass URLs through
///   `Redaction.url` and never interpolate a `Secret`'s value.
package struct Logger: Sendable {
    package var label: String
    package var sinks: [any LogSink]
    package var minimumLevel: LogLevel
    /// Where an entry's time comes from: the relay's clock, so a simulation's log reads in its
    /// own time. Labelled copies (`with(label:)`) keep it.
    package var clock: any RelayClock

    package init(
        label: String, sinks: [any LogSink], minimumLevel: LogLevel = .info, clock: any RelayClock = SystemClock()
    ) {
        self.label = label
        self.sinks = sinks
        self.minimumLevel = minimumLevel
        self.clock = clock
    }

    /// A logger that drops everything (for tools and tests that do not care).
    package static let disabled = Logger(label: "", sinks: [])

    package func with(label: String) -> Logger {
        var copy = self
        copy.label = label
        return copy
    }

    package func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        guard level <= minimumLevel, !sinks.isEmpty else { return }
        // Control characters are made visible here, once for every sink: a value from outside
        // quoted in a message must not end the line, forge a journald `<0>` prefix or drive a terminal.
        let text = ControlEscaping.escape(message())
        let entry = LogEntry(
            timeMs: clock.nowMs(), level: level, message: label.isEmpty ? text : "\(label): \(text)")
        for sink in sinks { sink.record(entry) }
    }

    package func error(_ message: @autoclosure () -> String) { log(.error, message()) }
    package func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    package func notice(_ message: @autoclosure () -> String) { log(.notice, message()) }
    package func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    package func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
}

/// Writes one line per event to standard error; with journald
/// (`JOURNAL_STREAM` set) each line carries a `<N>` level prefix instead of a timestamp.
package struct StandardErrorLogSink: LogSink {
    private let journal: Bool

    package init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        journal = environment["JOURNAL_STREAM"] != nil
    }

    package func record(_ entry: LogEntry) {
        let line =
            journal
            ? "<\(entry.level.rawValue)>\(entry.message)\n"
            : "\(Timestamp.iso8601(milliseconds: entry.timeMs)) \(entry.level.name) \(entry.message)\n"
        FileOutput.standardError.write(line)
    }
}

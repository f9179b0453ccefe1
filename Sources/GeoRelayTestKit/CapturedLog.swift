import GeoRelayCore
import Synchronization

/// Log entries a test reads back, or shows when it fails: an in-process forwarder's log is
/// the only account of what it did while a test waited for something that never came.
package final class CapturedLog: LogSink, Sendable {
    private let entries = Mutex<[LogEntry]>([])

    package init() {}

    package func record(_ entry: LogEntry) { entries.withLock { $0.append(entry) } }
    package var messages: [String] { entries.withLock { $0.map(\.message) } }
    package var logger: Logger { Logger(label: "test", sinks: [self], minimumLevel: .debug) }

    /// The last `count` entries, one a line with the time they were logged, for a failure's message.
    package func tail(_ count: Int = 40) -> String {
        let last = entries.withLock { $0.suffix(count) }
        return last.map { "\($0.timeMs) \($0.level.name) \($0.message)" }.joined(separator: "\n")
    }
}

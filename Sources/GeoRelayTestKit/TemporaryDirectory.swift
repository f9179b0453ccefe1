import Foundation

/// A fresh directory under /tmp, removed when the value is released.
///
/// Unix socket paths must stay under 108 bytes, so the names are short.
package final class TemporaryDirectory: Sendable {
    package let path: String

    /// - Parameter parent: where it is made (`/dev/shm` for a file whose syncs should cost
    ///   nothing, as the simulation's spool).
    package init(under parent: String = "/tmp") throws {
        var template = Array("\(parent)/grt.XXXXXX".utf8CString)
        guard let result = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw CocoaError(.fileWriteUnknown)
        }
        path = String(cString: result)
    }

    package func file(_ name: String) -> String { "\(path)/\(name)" }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }
}

import Foundation

/// Where a command writes: its output and its messages.
///
/// The executable hands in the terminal's standard output and error; tests hand in
/// files. The core never opens the terminal itself. Writes go straight to the
/// descriptor (no stdio buffer), so output and messages keep their order, and a
/// `status --watch` screen appears whole without a flush.
package struct Console: Sendable {
    package let standardOutput: FileHandle
    package let standardError: FileHandle

    package init(standardOutput: FileHandle, standardError: FileHandle) {
        self.standardOutput = standardOutput
        self.standardError = standardError
    }

    /// Writes `text` as it is (add the newline yourself).
    package func write(_ text: String) {
        standardOutput.write(Data(text.utf8))
    }

    /// Writes one line of output.
    package func line(_ text: String) {
        write(text + "\n")
    }

    /// Writes `georelay: <message>` to standard error.
    package func error(_ message: String) {
        standardError.write(Data("georelay: \(message)\n".utf8))
    }
}

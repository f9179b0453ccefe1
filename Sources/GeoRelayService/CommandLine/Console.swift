import GeoRelayCore

/// Where a command writes: its output and its messages.
///
/// The executable hands in the terminal's standard output and error; tests hand in
/// files. The core never opens the terminal itself. Writes go straight to the
/// descriptor (no stdio buffer), so output and messages keep their order, and a
/// `status --watch` screen appears whole without a flush.
package struct Console: Sendable {
    package let standardOutput: FileOutput
    package let standardError: FileOutput

    package init(standardOutput: FileOutput, standardError: FileOutput) {
        self.standardOutput = standardOutput
        self.standardError = standardError
    }

    /// Writes `text` as it is (add the newline yourself).
    package func write(_ text: String) {
        standardOutput.write(text)
    }

    /// Writes one line of output.
    package func line(_ text: String) {
        write(text + "\n")
    }

    /// Writes `georelay: <message>` to standard error.
    package func error(_ message: String) {
        standardError.write("georelay: \(message)\n")
    }
}

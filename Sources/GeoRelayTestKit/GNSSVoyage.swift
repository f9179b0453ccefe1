import Foundation

/// A vessel's receivers at sea with one attack injected, as `Tests/Helpers/gnss_voyage.py`
/// writes them: each line as the relay hears it, and when the attack shows.
package struct GNSSVoyage: Sendable {
    package struct Line: Sendable {
        /// The relay's monotonic clock when the line arrives, from the voyage's start.
        package var atMs: Int64
        package var receiver: String
        package var sentence: String
    }

    package var lines: [Line] = []
    /// When the attack first shows in what the receivers report (nil: a clean voyage).
    package var evidenceMs: Int64?
    /// The script's statement of what it injected.
    package var header = ""

    /// Runs the script with `arguments` (its `--help` lists them).
    package init(_ arguments: [String]) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Tests/Helpers/gnss_voyage.py")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [script.path] + arguments
        let pipe = Foundation.Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw GNSSVoyageError(description: "gnss_voyage.py \(arguments) exited \(process.terminationStatus)")
        }
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            if line.hasPrefix("# evidence-ms ") { evidenceMs = Int64(line.dropFirst(14)) }
            if line.hasPrefix("# attack ") { header = String(line.dropFirst(2)) }
            if line.hasPrefix("#") { continue }
            let parts = line.split(separator: " ", maxSplits: 2)
            guard parts.count == 3, let atMs = Int64(parts[0]) else {
                throw GNSSVoyageError(description: "gnss_voyage.py wrote \"\(line.prefix(80))\"")
            }
            lines.append(Line(atMs: atMs, receiver: String(parts[1]), sentence: String(parts[2])))
        }
    }
}

package struct GNSSVoyageError: Error, CustomStringConvertible {
    package let description: String
}

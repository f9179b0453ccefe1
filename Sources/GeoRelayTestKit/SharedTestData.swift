import Foundation

/// `../shared/testdata` beside the repository (read-only, not copied into it).
package enum SharedTestData {
    package static let root: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("shared/testdata")

    /// gpsd's regression logs from about 45 receivers, with gpsd's decoding of each.
    package static let nmea = root.appendingPathComponent("nmea")
    package static var haveNMEA: Bool { FileManager.default.fileExists(atPath: nmea.path) }

    /// The GPX 1.1 schema, for validating exports.
    package static let gpxSchema = root.appendingPathComponent("gpx/gpx-1.1.xsd")
    package static var haveGPXSchema: Bool { FileManager.default.fileExists(atPath: gpxSchema.path) }
}

import Foundation
import GeoRelayCore
import GeoRelaySpool

/// `georelay export`: the spool's history in formats GIS tools read, streamed
/// (constant memory for millions of positions).
package struct Exporter {
    package enum Format: String, CaseIterable, Sendable {
        case gpx, geojson, csv
    }

    package var format: Format
    package var device: String?
    package var sinceMs: Int64?
    package var untilMs: Int64?

    package init(format: Format, device: String?, sinceMs: Int64?, untilMs: Int64?) {
        self.format = format
        self.device = device
        self.sinceMs = sinceMs
        self.untilMs = untilMs
    }

    /// Buffers output and hands it on in large writes.
    package final class Output {
        private let handle: FileHandle
        private var buffer: [UInt8] = []

        package init(handle: FileHandle) {
            self.handle = handle
            buffer.reserveCapacity(1 << 16)
        }

        func write(_ text: String) {
            buffer.append(contentsOf: text.utf8)
            if buffer.count >= 1 << 16 { flush() }
        }

        package func flush() {
            handle.write(Data(buffer))
            buffer.removeAll(keepingCapacity: true)
        }
    }

    /// Writes the export; returns how many positions went out.
    @discardableResult
    package func run(reader: SpoolReader, to output: Output) throws -> Int {
        let devices = try reader.devices().filter { device == nil || $0.name == device }
        var count = 0
        switch format {
        case .gpx:
            output.write("""
                <?xml version="1.0" encoding="UTF-8"?>
                <gpx version="1.1" creator="georelay" xmlns="http://www.topografix.com/GPX/1/1" \
                xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:georelay="urn:georelay:gpx:1" \
                xsi:schemaLocation="http://www.topografix.com/GPX/1/1 http://www.topografix.com/GPX/1/1/gpx.xsd">

                """)
            for (id, name) in devices {
                output.write("<trk><name>\(xml(name))</name><trkseg>\n")
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    var point = "<trkpt lat=\"\(p.lat)\" lon=\"\(p.lon)\">"
                    if let altitude = p.altitude { point += "<ele>\(altitude)</ele>" }
                    point += "<time>\(Timestamp.iso8601(milliseconds: p.timeMs))</time>"
                    // GPX 1.1 has no speed or course: they go in extensions, in a namespace of ours.
                    var extensions = ""
                    if let speed = p.speed { extensions += "<georelay:speed>\(speed)</georelay:speed>" }
                    if let course = p.course { extensions += "<georelay:course>\(course)</georelay:course>" }
                    if let accuracy = p.accuracy { extensions += "<georelay:accuracy>\(accuracy)</georelay:accuracy>" }
                    if let alarm = p.alarm { extensions += "<georelay:alarm>\(xml(alarm))</georelay:alarm>" }
                    if !extensions.isEmpty { point += "<extensions>\(extensions)</extensions>" }
                    output.write(point + "</trkpt>\n")
                    count += 1
                    return true
                }
                output.write("</trkseg></trk>\n")
            }
            output.write("</gpx>\n")
        case .geojson:
            // RFC 7946: longitude before latitude; one LineString (or Point) feature per device.
            output.write(#"{"type":"FeatureCollection","features":["#)
            var firstFeature = true
            for (id, name) in devices {
                var points = 0
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { _ in
                    points += 1
                    return points < 2
                }
                guard points > 0 else { continue }
                output.write((firstFeature ? "" : ",") + #"{"type":"Feature","geometry":{"type":"# + (points > 1 ? #""LineString","coordinates":["# : #""Point","coordinates":"#))
                firstFeature = false
                var first = true
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    let altitude = p.altitude.map { ",\($0)" } ?? ""
                    output.write((first ? "" : ",") + "[\(p.lon),\(p.lat)\(altitude)]")
                    first = false
                    count += 1
                    return points > 1
                }
                var quoted = ""
                JSONValue.writeQuoted(name, to: &quoted)
                output.write((points > 1 ? "]" : "") + #"},"properties":{"device":"# + quoted + #","times":["#)
                first = true
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    output.write((first ? "" : ",") + "\"\(Timestamp.iso8601(milliseconds: p.timeMs))\"")
                    first = false
                    return points > 1
                }
                output.write("]}}")
            }
            output.write("]}\n")
        case .csv:
            output.write("device,time,lat,lon,altitude,speed,course,accuracy,battery,alarm\n")
            for (id, name) in devices {
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    func v(_ x: Double?) -> String { x.map { "\($0)" } ?? "" }
                    output.write([csv(name), Timestamp.iso8601(milliseconds: p.timeMs), "\(p.lat)", "\(p.lon)", v(p.altitude), v(p.speed),
                                  v(p.course), v(p.accuracy), v(p.battery), csv(p.alarm ?? "")].joined(separator: ",") + "\n")
                    count += 1
                    return true
                }
            }
        }
        output.flush()
        return count
    }

    private func xml(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }

    private func csv(_ text: String) -> String {
        text.contains(where: { $0 == "," || $0 == "\"" || $0.isNewline }) ? "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : text
    }
}

import GeoRelayCore
import GeoRelaySpool
import Glibc

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
        private let handle: FileOutput
        private var buffer: [UInt8] = []

        package init(handle: FileOutput) {
            self.handle = handle
            buffer.reserveCapacity(1 << 16)
        }

        func write(_ text: String) {
            buffer.append(contentsOf: text.utf8)
            if buffer.count >= 1 << 16 { flush() }
        }

        package func flush() {
            handle.write(buffer)
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
            output.write(
                """
                <?xml version="1.0" encoding="UTF-8"?>
                <gpx version="1.1" creator="georelay" xmlns="http://www.topografix.com/GPX/1/1" \
                xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:georelay="urn:georelay:gpx:1" \
                xsi:schemaLocation="http://www.topografix.com/GPX/1/1 http://www.topografix.com/GPX/1/1/gpx.xsd">

                """)
            for (id, name) in devices {
                output.write("<trk><name>\(xml(name))</name><trkseg>\n")
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    guard Self.onGlobe(p) else { return true }
                    var point = "<trkpt lat=\"\(p.lat)\" lon=\"\(p.lon)\">"
                    if let altitude = Self.finite(p.altitude) { point += "<ele>\(altitude)</ele>" }
                    point += "<time>\(Timestamp.iso8601(milliseconds: p.timeMs))</time>"
                    // GPX 1.1 has no speed or course: they go in extensions, in a namespace of ours.
                    var extensions = ""
                    if let speed = Self.finite(p.speed) { extensions += "<georelay:speed>\(speed)</georelay:speed>" }
                    if let course = Self.finite(p.course) {
                        extensions += "<georelay:course>\(course)</georelay:course>"
                    }
                    if let accuracy = Self.finite(p.accuracy) {
                        extensions += "<georelay:accuracy>\(accuracy)</georelay:accuracy>"
                    }
                    if let alarm = p.alarm { extensions += "<georelay:alarm>\(xml(alarm))</georelay:alarm>" }
                    if let odometer = Self.finite(p.odometer) {
                        extensions += "<georelay:odometer>\(JSONValue.format(number: odometer))</georelay:odometer>"
                    }
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
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    if Self.onGlobe(p) { points += 1 }
                    return points < 2
                }
                guard points > 0 else { continue }
                output.write(
                    (firstFeature ? "" : ",") + #"{"type":"Feature","geometry":{"type":"#
                        + (points > 1 ? #""LineString","coordinates":["# : #""Point","coordinates":"#))
                firstFeature = false
                var first = true
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    guard Self.onGlobe(p) else { return true }
                    let altitude = Self.finite(p.altitude).map { ",\($0)" } ?? ""
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
                    guard Self.onGlobe(p) else { return true }
                    output.write((first ? "" : ",") + "\"\(Timestamp.iso8601(milliseconds: p.timeMs))\"")
                    first = false
                    return points > 1
                }
                // Metres along the track at each point (`Odometer`), null where a position has none.
                output.write(#"],"odometers":["#)
                first = true
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    guard Self.onGlobe(p) else { return true }
                    output.write(
                        (first ? "" : ",") + (Self.finite(p.odometer).map { JSONValue.format(number: $0) } ?? "null"))
                    first = false
                    return points > 1
                }
                output.write("]}}")
            }
            output.write("]}\n")
        case .csv:
            output.write("device,time,lat,lon,altitude,speed,course,accuracy,battery,alarm,odometer\n")
            for (id, name) in devices {
                try reader.forEachPosition(deviceID: id, device: name, sinceMs: sinceMs, untilMs: untilMs) { p in
                    guard Self.onGlobe(p) else { return true }
                    func v(_ x: Double?) -> String { Self.finite(x).map { "\($0)" } ?? "" }
                    output.write(
                        [
                            csv(name), Timestamp.iso8601(milliseconds: p.timeMs), "\(p.lat)", "\(p.lon)", v(p.altitude),
                            v(p.speed),
                            v(p.course), v(p.accuracy), v(p.battery), csv(p.alarm ?? ""), v(p.odometer),
                        ].joined(separator: ",") + "\n")
                    count += 1
                    return true
                }
            }
        }
        output.flush()
        return count
    }

    /// Whether the position has a place to draw: a spool written before ingest bounded every
    /// field may hold one without, and no format can carry it.
    private static func onGlobe(_ p: Position) -> Bool {
        p.lat.isFinite && p.lon.isFinite && abs(p.lat) <= 90 && abs(p.lon) <= 180
    }

    /// The value when a number a reader parses (`nan` and `inf` are neither XML Schema's nor JSON's).
    private static func finite(_ value: Double?) -> Double? {
        value.flatMap { $0.isFinite ? $0 : nil }
    }

    /// Text as XML 1.0 allows it: the five escapes, and the characters it forbids outright (every
    /// C0 control but tab, LF and CR) replaced with U+FFFD, so the file still parses.
    private func xml(_ text: String) -> String {
        let allowed = String(
            String.UnicodeScalarView(
                text.unicodeScalars.map { scalar in
                    scalar.value < 0x20 && scalar != "\t" && scalar != "\n" && scalar != "\r" || scalar.value == 0xFFFE
                        || scalar.value == 0xFFFF
                        ? "\u{FFFD}" : scalar
                }))
        return allowed.replacing("&", with: "&amp;").replacing("<", with: "&lt;")
            .replacing(">", with: "&gt;").replacing("\"", with: "&quot;")
    }

    /// A text cell: quoted when it holds a separator, and never read as a formula. A cell that
    /// starts with `=`, `+`, `-`, `@`, tab or CR is one to a spreadsheet (a device id `=HYPERLINK(…)`),
    /// so it gets a leading `'` inside quotes, as OWASP's CSV injection advice says.
    private func csv(_ text: String) -> String {
        let formula = text.first.map { "=+-@\t\r".contains($0) } ?? false
        let cell = formula ? "'" + text : text
        return formula || cell.contains(where: { $0 == "," || $0 == "\"" || $0.isNewline })
            ? "\"" + cell.replacing("\"", with: "\"\"") + "\"" : cell
    }
}

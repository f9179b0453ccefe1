import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@Suite(.offThePool) struct ExportTests {
    func spooledWorld() throws -> RelayWorld {
        let world = try RelayWorld()
        let relay = try world.start()
        let client = try world.client()
        var lines = ""
        for i in 0..<20 {
            lines +=
                #"{"device":"boat & co","time":\#(1_784_953_800 + i),"lat":59.\#(100 + i),"lon":10.5,"alt":12.5,"speed":2.5,"course":90,"accuracy":4\#(i == 5 ? #","alarm":"sos""# : "")}"#
                + "\n"
        }
        lines += #"{"device":"buoy","time":1784953800,"lat":-33.5,"lon":151.25}"# + "\n"
        try client.write(lines)
        _ = client.readLines(21)
        relay.signal(SIGTERM)
        return world
    }

    @Test func gpxValidatesAgainstTheGPX11Schema() throws {
        let world = try spooledWorld()
        let file = world.directory.file("out.gpx")
        let result = try world.command(["export", "--format", "gpx", "-o", file])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("exported 21 positions"))
        let gpx = try String(contentsOfFile: file, encoding: .utf8)
        #expect(gpx.contains("<name>boat &amp; co</name>"))
        #expect(gpx.contains("<georelay:speed>2.5</georelay:speed>"))
        let schema = SharedTestData.gpxSchema.path
        guard SharedTestData.haveGPXSchema else {
            print("../shared/testdata/gpx/gpx-1.1.xsd is absent: the GPX schema validation is skipped")
            return
        }
        try #require(
            FileManager.default.isExecutableFile(atPath: "/usr/bin/xmllint"),
            "xmllint missing (make test installs libxml2-utils)")
        let xmllint = try RelayProcess.run("/usr/bin/xmllint", ["--noout", "--schema", schema, file])
        #expect(xmllint.status == 0, "\(xmllint.stderr)")
    }

    @Test func geoJSONPutsLongitudeFirstAndCSVHasARowEach() throws {
        let world = try spooledWorld()
        let geojson = try world.command(["export", "--format", "geojson"])
        #expect(geojson.status == 0)
        guard case .object(let collection) = try JSONParser.parse(geojson.stdout),
            case .array(let features)? = collection["features"]
        else {
            Issue.record("not a FeatureCollection")
            return
        }
        #expect(collection["type"] == .string("FeatureCollection"))
        #expect(features.count == 2)
        guard case .object(let boat) = features[0], case .object(let geometry)? = boat["geometry"],
            case .array(let coordinates)? = geometry["coordinates"], case .array(let first)? = coordinates.first
        else {
            Issue.record("no LineString")
            return
        }
        #expect(geometry["type"] == .string("LineString"))
        #expect(coordinates.count == 20)
        #expect(first == [.number(10.5), .number(59.1), .number(12.5)])
        guard case .object(let buoy) = features[1], case .object(let point)? = buoy["geometry"] else { return }
        #expect(point["type"] == .string("Point"))
        #expect(point["coordinates"] == .array([.number(151.25), .number(-33.5)]))

        let csv = try world.command([
            "export", "--format", "csv", "--device", "boat & co", "--since", "2026-07-25T04:30:05Z",
        ])
        let rows = csv.stdout.split(separator: "\n")
        #expect(rows.first == "device,time,lat,lon,altitude,speed,course,accuracy,battery,alarm,odometer")
        #expect(rows.count == 1 + 15)
        // The alarm, then the odometer: metres along the boat's track since its first fix.
        #expect(rows[1].contains(",sos,"))
        let odometers = rows.dropFirst().compactMap { $0.split(separator: ",").last.flatMap { Double($0) } }
        #expect(odometers.count == 15 && odometers == odometers.sorted() && odometers[0] > 0, "\(odometers)")
        #expect(try world.command(["export", "--format", "kml"]).status == 64)
    }

    /// A device id or alarm a spreadsheet would run as a formula is written as text.
    @Test func csvCellsNeverStartAFormula() throws {
        let world = try RelayWorld()
        let relay = try world.start()
        let client = try world.client()
        try client.write(
            #"{"device":"=HYPERLINK(1)","time":1784953800,"lat":1,"lon":2,"alarm":"@SUM(1)"}"# + "\n"
                + #"{"device":"-2+3","time":1784953800,"lat":-1,"lon":-2,"alarm":"+cmd"}"# + "\n")
        let replies = client.readLines(2)
        #expect(replies.allSatisfy { $0.hasPrefix("ok ") }, "\(replies)")
        relay.signal(SIGTERM)
        let rows = try world.command(["export", "--format", "csv"]).stdout.split(separator: "\n").dropFirst()
        #expect(rows.count == 2)
        for row in rows {
            // Every text cell quoted with a leading apostrophe; numbers (here negative) stay numbers.
            #expect(row.hasPrefix("\"'"), "\(row)")
            #expect(row.hasSuffix("\",1.0"), "\(row)")
        }
        #expect(rows.contains { $0.contains(",-1.0,-2.0,") }, "\(rows)")
    }
}

@Suite(.offThePool) struct ReplayTests {
    @Test func aServerThatLostHistoryGetsItAgainAsHistory() async throws {
        let world = try RelayWorld()
        try world.start()
        let client = try world.client()
        try client.write((0..<10).map { line("boat", $0) }.joined())
        _ = client.readLines(10)
        #expect(await world.server.waitUntil { $0.count >= 10 })
        // Acknowledged too before the server goes: a position stored but not yet answered when
        // the connection closes is rightly sent again, and would arrive ahead of the live one.
        let acknowledged = try await world.waitForStatus { $0["destinations"]?.array?.first?["pending"]?.number == 0 }
        #expect(acknowledged["destinations"]?.array?.first?["pending"]?.number == 0, "the first ten acknowledged")
        // The server is restored from a backup that predates all of it, and is down while the
        // history is queued and a live position arrives: when it is back, both wait, and the live
        // one must go first. (With the server up the forwarder may pick the queue up before the
        // live position exists, at its 30 s check, on a loaded machine.)
        world.server.clear()
        let port = world.server.http.port
        world.server.http.stop()
        let since = Timestamp.iso8601(milliseconds: fixTimeMs(0) - 100_000)
        let result = try world.command([
            "replay", "--destination", "traccar", "--since", since, "--until",
            Timestamp.iso8601(milliseconds: fixTimeMs(9)), "--all",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("queued 10 of 10 positions for traccar"))
        #expect(result.stdout.contains("boat: nothing before"))
        let queued = try #require(try world.statusJSON()["destinations"]?.array?.first)
        #expect((queued["replayPending"]?.number ?? 0) > 0)
        // A live position arrives meanwhile: it goes first, the history follows.
        try client.write(line("boat", 10))
        _ = client.readLine()
        try world.server.http.start(port: port)
        #expect(
            await world.server.waitUntil { $0.count >= 11 },
            "the live position and the history within 30 s of the server's return")
        let stored = world.server.positions
        #expect(stored.first?.fixTimeMs == fixTimeMs(10))
        #expect(stored.first?.attributes["archive"] == nil)
        #expect(Set(stored.dropFirst().map(\.fixTimeMs)) == Set((0..<10).map(fixTimeMs)))
        #expect(stored.dropFirst().allSatisfy { $0.attributes["archive"] == .bool(true) })
        var pending = 1.0
        for _ in 0..<100 where pending > 0 {
            pending = try world.statusJSON()["destinations"]?.array?.first?["replayPending"]?.number ?? 1
            if pending > 0 { try await Task.sleep(for: .milliseconds(20)) } // the queue empties with the next commit
        }
        #expect(pending == 0)
        #expect(try world.command(["replay", "--destination", "nowhere", "--since", since]).status == 64)
    }
}

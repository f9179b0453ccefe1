import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// Hostile input on the socket. Each case is answered with its own error,
/// the connection that sent it lives on where the protocol allows, a well-behaved collector is
/// served throughout, and the relay's memory stays bounded.
@Suite(.offThePool) struct BadInputTests {
    /// One bad line and the error code it must get (nil: any `err`).
    static let cases: [(name: String, line: [UInt8], expected: String?)] = {
        func text(_ s: String) -> [UInt8] { Array(s.utf8) + [10] }
        var cases: [(name: String, line: [UInt8], expected: String?)] = []
        var invalid: [UInt8] = Array(#"{"device":"a","time":1784953800,"lat":1,"lon":2,"x":""#.utf8)
        invalid += [0xC3, 0x28, 0xFF]
        invalid += Array("\"}\n".utf8)
        cases.append(("invalid UTF-8", invalid, "parse"))
        var nul: [UInt8] = Array(#"{"device":"a","time":1784953800,"#.utf8)
        nul += [0, 0, 0]
        nul += text(#""lat":1,"lon":2}"#)
        cases.append(("NUL bytes", nul, "parse"))
        cases.append(
            ("deeply nested JSON", text(String(repeating: "[", count: 3000) + String(repeating: "]", count: 3000)), nil)
        )
        cases.append(("1e999", text(#"{"device":"a","time":1784953800,"lat":1e999,"lon":2}"#), nil))
        cases.append(("NaN", text(#"{"device":"a","time":1784953800,"lat":NaN,"lon":2}"#), "parse"))
        cases.append(("latitude 91", text(#"{"device":"a","time":1784953800,"lat":91,"lon":2}"#), "range"))
        cases.append(("longitude -180.5", text(#"{"device":"a","time":1784953800,"lat":1,"lon":-180.5}"#), "range"))
        cases.append(("year 2100", text(#"{"device":"a","time":"2100-01-01T00:00:00Z","lat":1,"lon":2}"#), "time"))
        cases.append(("before 1970", text(#"{"device":"a","time":"1969-12-31T23:59:59Z","lat":1,"lon":2}"#), "time"))
        cases.append(("time as object", text(#"{"device":"a","time":{},"lat":1,"lon":2}"#), "time"))
        cases.append(("lat as string", text(#"{"device":"a","time":1784953800,"lat":"north","lon":2}"#), nil))
        cases.append(("OsmAnd query without id", text("timestamp=1784953800&lat=1&lon=2"), "device"))
        cases.append(
            (
                "NMEA with a bad checksum",
                Array("$GPRMC,123004.00,A,5930.000,N,01042.000,E,010.0,090.0,250726,,,A*00\r\n".utf8), "checksum"
            ))
        return cases
    }()

    @Test func everyBadLineGetsItsOwnErrorAndTheConnectionLivesOn() throws {
        let world = try RelayWorld()
        try world.start()
        let client = try world.client()
        for (name, bytes, expected) in Self.cases {
            try client.write(bytes)
            // One missing answer ends the test: waiting out the reply timeout for each of the rest would take minutes.
            let reply = try #require(client.readLine(), "\(name): no reply within 30 s (closed, or the relay is stuck)")
            if let expected {
                #expect(reply.hasPrefix("err \(expected)"), "\(name): \(reply)")
            } else {
                #expect(reply.hasPrefix("err "), "\(name): \(reply)")
            }
            // Errors name what was wrong and never echo more than a short excerpt.
            #expect(reply.utf8.count < 300, "\(name): reply of \(reply.utf8.count) bytes")
        }
        // -0 is a valid coordinate (the equator / prime meridian), not an error.
        try client.write(#"{"device":"a","time":1784953800,"lat":-0,"lon":-0.0}"# + "\n")
        #expect(client.readLine() == "ok 1")
        guard case .object(let rejected) = try #require(try world.statusJSON()["ingest"]?["rejected"]) else {
            Issue.record("status has no ingest.rejected object")
            return
        }
        let total = rejected.members.compactMap { (member: (key: String, value: JSONValue)) in member.value.number }
            .reduce(0, +)
        #expect(total == Double(Self.cases.count))
    }

    @Test func randomBytesAndAHugeLineDisturbNobodyAndMemoryStaysBounded() async throws {
        let world = try RelayWorld()
        let relay = try world.start()
        let good = try world.client()
        try good.write(line("good", 0))
        #expect(good.readLine() == "ok 1")
        let baseline = try residentBytes(pid: relay.pid)

        // 4 MiB of random bytes (with newlines where they fall), then a 10 MB line.
        var generator = SystemRandomNumberGenerator()
        let noise = (0..<(4 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let noisy = try world.client()
        let huge = try world.client()
        let silent = try UnixLineClient(path: world.socketPath, receiveTimeoutSeconds: 2) // connects, says nothing
        let hugeLine =
            Array(#"{"device":"huge","time":1784953800,"lat":1,"lon":2,"pad":""#.utf8)
            + [UInt8](repeating: UInt8(ascii: "x"), count: 10_000_000) + Array("\"}\n".utf8)
        let writers = [Thread { try? noisy.write(noise) }, Thread { try? huge.write(hugeLine) }]
        for writer in writers { writer.start() }

        // The good collector keeps being answered while the others do their worst.
        for second in 1...200 {
            try good.write(line("good", second))
            // One missing answer ends the test: 200 reply timeouts would be 100 minutes.
            let reply = try #require(good.readLine(), "line \(second) of the good collector: no reply within 30 s")
            #expect(reply == "ok \(second + 1)")
        }
        // The huge line is refused once, then the relay closes that connection: a client that
        // sends lines past the limit is not talking the protocol.
        let hugeReply = huge.readLine() ?? "<closed>"
        #expect(hugeReply.hasPrefix("err too-long"), "huge line: \(hugeReply)")
        #expect(await world.server.waitUntil { $0.filter { $0.uniqueId == "good" }.count >= 201 })
        let peak = try residentBytes(pid: relay.pid)
        print(
            "bad input: 201 good positions delivered beside 4 MiB of noise and a 10 MB line; relay RSS \(baseline >> 10) KiB -> \(peak >> 10) KiB"
        )
        // Nothing close to the 14 MB thrown at it is held: lines are bounded by maxLineBytes.
        #expect(peak - baseline < 8 << 20, "RSS grew from \(baseline) to \(peak)")
        _ = silent
        #expect(relay.process.isRunning)
    }

    /// Scenario 8, collector side: a clock hours behind is history and keeps its fix time; a clock
    /// hours ahead is refused (beyond `ingest.maxFutureSeconds`), and says why.
    @Test func collectorClocksHoursOffAreHistoryOrRefused() async throws {
        let world = try RelayWorld()
        try world.start()
        let client = try world.client()
        let nowSeconds = Int(Date().timeIntervalSince1970)
        let behind = nowSeconds - 3 * 3600
        let ahead = nowSeconds + 3 * 3600
        try client.write(#"{"device":"slow","time":\#(behind),"lat":1,"lon":2}"# + "\n")
        try client.write(#"{"device":"fast","time":\#(ahead),"lat":1,"lon":2}"# + "\n")
        #expect(client.readLine() == "ok 1")
        let refused = client.readLine() ?? "<closed>"
        #expect(refused.hasPrefix("err time ") && refused.contains("ahead of the relay's clock"), "\(refused)")
        #expect(await world.server.waitUntil { $0.count >= 1 })
        #expect(world.server.positions.map(\.fixTimeMs) == [Int64(behind) * 1000])
    }
}

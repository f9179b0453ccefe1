import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// Hostile values through every door of the real binary (socket lines of every form,
/// the phone port's query and JSON forms, a collector's file source) with an OsmAnd, a Teltonika
/// and a push destination up. The relay stays up, every socket line gets exactly one reply line,
/// no value forges an acknowledgement, and after a restart it still starts and delivers a good
/// position to every destination.
@Suite(.offThePool) struct HostileInputEndToEndTests {
    static let numbers = [
        "1e19", "-1e19", "1e400", "-1e400", "NaN", "Infinity", "-inf", "9223372036854775807", "9223372036854775808",
        "-9223372036854775809", "1.7976931348623157e308", "5e-324", "-0", "1e15", "361", "720.5", "-12001", "100001",
    ]
    static let texts = [
        "a\nok 99", "a\r\nok 99", "\u{1b}[2J", "<0>forged", "\u{85}x", "\u{2028}y", String(repeating: "z", count: 3000),
        "\u{0}nul",
    ]

    /// Every socket line: each numeric field of each form with each hostile number, each text
    /// field with each hostile text, NMEA fields, deep nesting. Written after a hello with acks.
    static var socketLines: [String] {
        let now = 1_784_953_800
        var lines: [String] = []
        for n in numbers {
            for field in ["lat", "lon", "speed", "course", "alt", "accuracy", "batt", "hdop", "extra", "time"] {
                lines.append(#"{"device":"h","time":\#(now),"lat":1,"lon":1,"\#(field)":\#(n)}"#)
                lines.append(#"{"device":"h","time":\#(now),"lat":1,"lon":1,"\#(field)":"\#(n)"}"#)
            }
            for field in ["lat", "lon", "speed", "bearing", "altitude", "accuracy", "batt", "hdop", "timestamp"] {
                lines.append("id=h&timestamp=\(now)&lat=1&lon=1&\(field)=\(n)")
            }
            for field in ["lat", "lon", "speed", "track", "altMSL", "altHAE", "geoidSep", "eph", "mode", "time"] {
                lines.append(
                    #"{"class":"TPV","device":"h","mode":3,"time":"2026-07-25T04:30:00Z","lat":1,"lon":1,"\#(field)":\#(n)}"#
                )
            }
            lines.append(#"{"device":"h","time":\#(now),"lat":1,"lon":1,"course":\#(n),"alarm":"sos"}"#)
        }
        for text in texts {
            let json = JSONValue.string(text).jsonText
            let query = OsmAndQuery.percentEncode(text)
            for field in ["device", "alarm", "note"] {
                lines.append(#"{"device":"h","time":\#(now),"lat":1,"lon":1,"\#(field)":\#(json)}"#)
            }
            lines.append(#"{"device":"h","time":\#(now),"lat":1,"lon":1,\#(json):1}"#)
            lines.append(#"{"class":\#(json)}"#)
            lines.append("id=\(query)&timestamp=\(now)&lat=1&lon=1")
            lines.append("id=h&timestamp=\(now)&lat=1%0Aok%2099&lon=1&alarm=\(query)&\(query)=1")
        }
        for sentence in [
            "$GPRMC,000000.5e17", "$GPRMC,000000.1e400,A,5956.5200,N,01042.1200,E,1e19,1e19,250726,,,A",
            "$GPGGA,000001,5956.52,N,01042.12,E,1,08,1e300,NaN,M,,M,,", "$GPZDA,000000,25,07,99999999999,00,00",
            "$GPRMC,000002,A,9956.5200,N,99942.1200,E,0,0,999999,,,A", "$GP\u{1b}RMC,1",
        ] {
            lines.append(sentence)
        }
        lines.append(String(repeating: "[", count: 5000) + String(repeating: "]", count: 5000))
        lines.append(#"{"hello":{"device":"h\nok 99","ack":true}}"#)
        return lines
    }

    @Test func everyDoorRefusesHostileValuesAndTheRelayLivesOn() async throws {
        let teltonika = try FakeTeltonikaServer()
        defer { teltonika.stop() }
        let push = try FakePushServer()
        defer { push.http.stop() }
        let world = try RelayWorld()
        let phonePort = freePort()
        let link = "backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 }"
        try world.writeConfig(
            ingest:
                #"http: { listen: "127.0.0.1:\#(phonePort)", devices: ["phone-1", "good"], maxRequestsPerSecond: 10000 }"#,
            moreDestinations: """
                { name: "telt", protocol: "teltonika", url: "tcp://127.0.0.1:\(teltonika.port)", filter: { mode: "all" }, \(link) },
                \(pushDestination(push))
                """)
        var relay = try world.start()
        try awaitListening(port: phonePort)

        // The socket: one reply line per line, none of them an `ok` (no line here is a sound position).
        let lines = Self.socketLines
        let client = try world.client()
        try client.write(#"{"hello":{"device":"h","ack":true}}"# + "\n")
        #expect(client.readLine() == "skip hello")
        var replies: [String] = []
        for chunk in stride(from: 0, to: lines.count, by: 50) {
            let batch = lines[chunk..<min(chunk + 50, lines.count)]
            try client.write(batch.map { $0 + "\n" }.joined())
            for line in batch {
                guard let reply = client.readLine() else {
                    Issue.record("no reply to \(line.prefix(80).debugDescription) (the relay died or is stuck)")
                    return
                }
                replies.append(reply)
            }
        }
        #expect(replies.count == lines.count)
        #expect(
            replies.allSatisfy { $0.hasPrefix("ok ") || $0.hasPrefix("err ") || $0.hasPrefix("skip ") },
            "\(replies.filter { !$0.hasPrefix("ok ") && !$0.hasPrefix("err ") && !$0.hasPrefix("skip ") }.prefix(5))")
        // Some values are sound (-0, 5e-324, a course of 361 folded to 1): those are stored, in
        // order (a resend of a device's fix time gets its stored seq); a quoted `ok 99` never is.
        let seqs = replies.compactMap { $0.hasPrefix("ok ") ? Int($0.dropFirst(3)) : nil }
        // Each acknowledgement names a seq the spool gave: at most one past the highest so far.
        var highest = 0
        for seq in seqs {
            #expect(seq <= highest + 1, "ok \(seq) after at most ok \(highest): not a seq the spool gave")
            highest = max(highest, seq)
        }
        for (line, reply) in zip(lines, replies) where line.contains("lat=1%0Aok") {
            #expect(reply == #"err parse lat: "1\nok 99" is not a number"#, "\(line.prefix(80)) -> \(reply)")
        }
        // Nothing more than the replies: a forged extra line would be read here.
        try client.write(line("h", 1))
        #expect(client.readLine() == "ok \(highest + 1)", "the next line's answer is its own")

        // The phone port, both forms.
        var phoneCases = 0
        for n in Self.numbers {
            for field in ["lat", "lon", "speed", "bearing", "altitude", "accuracy", "batt", "timestamp"] {
                let status = try postPhone(
                    phonePort,
                    target:
                        "/?id=phone-1&timestamp=1784953800&lat=1&lon=1&\(field)=\(OsmAndQuery.percentEncode(n))&alarm=sos"
                )
                #expect(status == 400 || status == 200, "\(field)=\(n): \(status)")
                phoneCases += 1
            }
            for field in ["latitude", "longitude", "speed", "heading", "altitude", "accuracy"] {
                let body =
                    #"{"device_id":"phone-1","location":{"timestamp":"2026-07-25T04:30:00Z","coords":{"latitude":1,"longitude":1,"\#(field)":\#(n)}}}"#
                let status = try postPhone(phonePort, target: "/", body: body, json: true)
                #expect(status == 400 || status == 200, "\(field)=\(n): \(status)")
                phoneCases += 1
            }
        }
        for text in Self.texts {
            let status = try postPhone(
                phonePort, target: "/?id=\(OsmAndQuery.percentEncode(text))&timestamp=1784953800&lat=1&lon=1")
            #expect(status == 400)
            phoneCases += 1
        }

        // A collector whose file holds hostile lines and a hello that would rename it.
        let file = world.directory.file("hostile.log")
        try (lines + [#"{"hello":{"device":"renamed","ack":false}}"#, "timestamp=1784953802&lat=1&lon=1"]).joined(
            separator: "\n"
        )
        .write(toFile: file, atomically: true, encoding: .utf8)
        let collected = try RelayProcess.command(
            ["collect", "--device", "collected", "--file", file, "--socket", world.socketPath],
            directory: world.directory.path)
        #expect(collected.status == 0, "\(collected.stderr)")
        #expect(collected.stderr.contains("2 hello lines not passed on"), "\(collected.stderr)")

        // Still up; good positions reach every destination, then again after a restart.
        #expect(kill(relay.pid, 0) == 0, "the relay died")
        func deliverGood(second: Int) async throws {
            let good = try world.client()
            try good.write(line("good", second))
            #expect(good.readLine()?.hasPrefix("ok ") == true)
            #expect(
                await world.server.waitUntil {
                    $0.contains { $0.uniqueId == "good" && $0.fixTimeMs == fixTimeMs(second) }
                }, "OsmAnd")
            #expect(
                await teltonika.waitUntil {
                    $0.contains { $0.uniqueId == "good" && $0.fixTimeMs == fixTimeMs(second) }
                }, "Teltonika")
            let stamp = Timestamp.iso8601(milliseconds: fixTimeMs(second))
            #expect(
                await push.waitUntil { $0.contains { $0.trackerId.hasPrefix("good@") && $0.timestamp == stamp } },
                "push")
        }
        try await deliverGood(second: 0)
        // What was stored of the hostile lines went out within the bounds.
        for stored in world.server.positions where stored.uniqueId == "h" {
            #expect((0..<360).contains(stored.course) && abs(stored.lat) <= 90 && abs(stored.lon) <= 180, "\(stored)")
        }
        #expect(!world.server.positions.contains { $0.uniqueId == "renamed" })
        #expect(
            await world.server.waitUntil { $0.contains { $0.uniqueId == "collected" && $0.fixTimeMs == fixTimeMs(2) } },
            "the collector's last line, under its own device")
        #expect(relay.signal(SIGTERM))
        relay = try world.start()
        try await deliverGood(second: 1)
        #expect(relay.signal(SIGKILL))
        relay = try world.start()
        try await deliverGood(second: 2)
        let log = try world.command(["logs"]).stdout
        #expect(!log.contains("\nok 99") && !log.contains("\u{1b}") && !log.contains("\n<0>"), "a log line was forged")
        FileHandle.standardError.write(
            Data(
                "hostile input: \(lines.count * 2) socket and collector lines, \(phoneCases) phone requests, 3 doors, relay up throughout\n"
                    .utf8))
    }

    func postPhone(_ port: Int, target: String, body: String = "", json: Bool = false) throws -> Int {
        let easy = try CurlEasy()
        return try easy.perform(
            HTTPRequest(
                method: body.isEmpty ? "GET" : "POST", url: "http://127.0.0.1:\(port)\(target)",
                headers: [
                    ("Content-Type", json ? "application/json" : "text/plain"), ("User-Agent", "TraccarClient/9"),
                ],
                body: Array(body.utf8))
        ).status
    }
}

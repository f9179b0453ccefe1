import GeoRelayCore
import GeoRelayTestTraits
import Testing

/// Hostile values through every form a line or a phone request can take, one session each:
/// the session never traps, every line gets exactly one reply line, what it stores is within
/// ``PositionBounds``, and what it refuses is named (`err range`/`err time` with the field).
@Suite(.offThePool) struct HostileInputTests {
    let clock = ManualClock()

    func session() -> IngestSession {
        IngestSession(
            rules: IngestSession.Rules(
                decoder: LineDecoder(maxFutureSeconds: 600), clock: clock.ingestClock, maxLineBytes: 8192))
    }

    /// Feeds `lines` after a hello with acks; returns the replies (hello's excluded) and what was stored.
    func run(_ lines: [String]) -> (replies: [String], stored: [Position]) {
        var s = session()
        var stored: [Position] = []
        var seq: Int64 = 0
        func perform(_ actions: [IngestSession.Action]) {
            for case .store(let positions, let ticket) in actions {
                stored += positions
                seq += 1
                s.stored(ticket, .success(seq))
            }
        }
        for line in [#"{"hello":{"device":"boat","ack":true}}"#] + lines {
            perform(Array(line.utf8).withUnsafeBufferPointer { s.receive(line: $0) })
        }
        perform(s.finish())
        var output: [UInt8] = []
        s.collectReplies(into: &output)
        let replies = String(decoding: output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            .dropLast().map(String.init)
        return (Array(replies.dropFirst()), stored)
    }

    static let hostileNumbers = [
        "1e19", "-1e19", "1e400", "-1e400", "NaN", "nan", "Infinity", "-inf", "9223372036854775807",
        "9223372036854775808", "-9223372036854775809", "1.7976931348623157e308", "5e-324", "-0", "0x1p64", "1e15",
        "361",
    ]

    /// Every numeric field of the JSON, OsmAnd and gpsd forms, and the phone's JSON body, with
    /// every hostile number: one reply each, and nothing stored outside the bounds.
    @Test func extremeNumbersInEveryFieldOfEveryForm() {
        let now = "2026-07-25T04:29:00Z"
        var lines: [String] = []
        for n in Self.hostileNumbers {
            for field in [
                "lat", "lon", "speed", "course", "alt", "accuracy", "batt", "eph", "track", "bearing", "hdop", "extra",
            ] {
                lines.append(#"{"time":"\#(now)","lat":1,"lon":1,"\#(field)":"\#(n)"}"#)
                lines.append(#"{"time":"\#(now)","lat":1,"lon":1,"\#(field)":\#(n)}"#)
            }
            for field in [
                "lat", "lon", "speed", "bearing", "heading", "altitude", "accuracy", "batt", "hdop", "odometer",
            ] {
                lines.append("id=boat&timestamp=1784953740&lat=1&lon=1&\(field)=\(n)")
            }
            for field in ["lat", "lon", "speed", "track", "alt", "altMSL", "altHAE", "geoidSep", "eph", "epx", "mode"] {
                lines.append(#"{"class":"TPV","mode":3,"time":"\#(now)","lat":1,"lon":1,"\#(field)":\#(n)}"#)
            }
            lines.append(#"{"time":\#(n),"lat":1,"lon":1}"#)
            lines.append("id=boat&timestamp=\(n)&lat=1&lon=1")
            lines.append("id=boat&timestamp=1784953740&location=\(n),\(n)")
        }
        let (replies, stored) = run(lines)
        #expect(replies.count == lines.count, "\(replies.count) replies to \(lines.count) lines")
        for (line, reply) in zip(lines, replies) {
            #expect(
                reply.hasPrefix("ok ") || reply.hasPrefix("err ") || reply.hasPrefix("skip "), "\(line) -> \(reply)")
        }
        for position in stored {
            #expect(PositionBounds.problem(in: position) == nil, "stored \(position)")
            #expect(position.course.map { (0..<360).contains($0) } ?? true, "course not folded: \(position)")
        }
        // The cases from the field: refused, naming the field.
        #expect(
            run([#"{"time":"\#(now)","lat":1,"lon":1,"course":1e19,"alarm":"sos"}"#]).replies == [
                "err range course 1e+19 outside -360...720"
            ])
        #expect(
            run(["id=boat&timestamp=1784953740&lat=1&lon=1&bearing=1e19&alarm=sos"]).replies.first?.hasPrefix(
                "err range course") == true)
        #expect(
            run([#"{"time":"\#(now)","lat":1,"lon":1,"speed":"NaN"}"#]).replies == [
                "err range speed is not a finite number"
            ])
        #expect(
            run([#"{"time":"\#(now)","lat":1,"lon":1,"alt":-20000}"#]).replies == [
                "err range alt -20000 outside -12000...100000"
            ])
        #expect(run(["id=boat&timestamp=99999999999999999&lat=1&lon=1"]).replies.first?.hasPrefix("err time") == true)
        // A course one turn out is a slip, folded; north stays 0.
        let folded = run([
            #"{"time":"\#(now)","lat":1,"lon":1,"course":370}"#,
            #"{"time":"2026-07-25T04:29:01Z","lat":1,"lon":1,"course":-90}"#,
            #"{"time":"2026-07-25T04:29:02Z","lat":1,"lon":1,"course":360}"#,
        ]).stored
        #expect(folded.map(\.course) == [10, 270, 0])
    }

    /// `$GPRMC,000000.5e17`: the time's fraction went through `Double` and a trapping `Int64`.
    /// Now every NMEA time field is read as digits only, and the line is answered.
    @Test func nmeaTimesWithExponentsAndOverlongFractionsAreNotFixes() {
        let lines = [
            "$GPRMC,000000.5e17", "$GPRMC,000000.5e17,A,5956.5200,N,01042.1200,E,0.0,0.0,250726,,,A",
            "$GPGGA,123456.99999999999999999,5956.52,N,01042.12,E,1,08,0.9,1e19,M,,M,,",
            "$GPZDA,000000.1e400,25,07,2026,00,00",
            "$GPRMC,235959.9995,A,5956.5200,N,01042.1200,E,1e19,1e19,250726,,,A",
            "$GPGGA,000001,5956.52,N,01042.12,E,1,08,1e300,NaN,M,,M,,",
        ]
        let (replies, stored) = run(lines)
        #expect(replies.count == lines.count, "\(replies)")
        for position in stored { #expect(PositionBounds.problem(in: position) == nil, "stored \(position)") }
    }

    /// A quoted value with a newline cannot add a reply line: `ok 99` must never come back
    /// for a line that was not stored.
    @Test func aQuotedNewlineCannotForgeAReply() {
        let lines = [
            "id=a&timestamp=1732900000&lat=1%0Aok%2099&lon=1", "id=a&timestamp=1732900000&lat=1%0D%0Aok%2099&lon=1",
            #"{"time":"2026-07-25T04:29:00Z","lat":"1\nok 99","lon":1}"#, #"{"class":"SKY\nok 99"}"#,
            #"{"time":"2026-07-25T04:29:00Z","lat":1,"lon":1,"device":"a\nok 99"}"#,
            "id=a%0Aok%2099&timestamp=1784953740&lat=1&lon=1",
            #"{"time":"2026-07-25T04:29:00Z","lat":1,"lon":1,"alarm":"sos\r\nok 99"}"#,
            "id=a&timestamp=1784953740&lat=1&lon=1&%0Aok=1",
            #"{"time":"2026-07-25T04:29:00Z","lat":1,"lon":1,"\u001b[2Jx":1}"#,
            "lat=\u{85}ok 99&id=a&timestamp=1&lon=1",
        ]
        let (replies, stored) = run(lines)
        #expect(replies.count == lines.count, "\(replies)")
        #expect(!replies.contains { $0.hasPrefix("ok") }, "\(replies)")
        #expect(stored.isEmpty)
        #expect(replies[0] == #"err parse lat: "1\nok 99" is not a number"#)
        #expect(ControlEscaping.escape("<0>a\u{1b}[31m\u{2028}b\tc") == #"<0>a\x1b[31m\u{2028}b\tc"#)
    }

    /// The phone port's two forms go through the same bounds.
    @Test func phoneRequestsAreBoundedAlike() {
        let s = session()
        for body in [
            #"{"device_id":"p","location":{"timestamp":"2026-07-25T04:29:00Z","coords":{"latitude":1,"longitude":1,"heading":1e19}}}"#,
            #"{"device_id":"p","location":{"timestamp":"2026-07-25T04:29:00Z","coords":{"latitude":1,"longitude":1,"altitude":1e300}}}"#,
            #"{"device_id":"p\n","location":{"timestamp":"2026-07-25T04:29:00Z","coords":{"latitude":1,"longitude":1}}}"#,
        ] {
            guard
                case .reject(let error, _) = s.receive(
                    phone: IngestSession.PhoneRequest(isJSON: true, target: "/", body: Array(body.utf8)))
            else {
                Issue.record("stored \(body)")
                continue
            }
            #expect(error.code == "range" || error.code == "device")
        }
        let query = IngestSession.PhoneRequest(
            isJSON: false, target: "/?id=boat&timestamp=1784953740&lat=1&lon=1&bearing=1e19&alarm=sos", body: [])
        guard case .reject(let error, _) = s.receive(phone: query) else {
            Issue.record("stored a bearing of 1e19")
            return
        }
        #expect(error.description == "range course 1e+19 outside -360...720")
    }
}

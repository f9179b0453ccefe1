import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

@Suite(.offThePool) struct LineDecoderTests {
    let decoder = LineDecoder(maxFutureSeconds: 600)
    let now: Int64 = 1_784_953_800_000 // 2026-07-25T04:30:00Z

    func position(_ line: String, device: String? = nil) throws -> Position {
        guard case .position(let p) = try decoder.decode(line, defaultDevice: device) else {
            throw IngestError.parse("not a position")
        }
        return p
    }

    @Test func jsonPositionWithEveryField() throws {
        let p = try position(
            #"{"device":"gps-bow","time":"2026-07-25T04:29:00Z","lat":59.5,"lon":10.25,"speed":3.5,"course":180,"alt":12,"accuracy":4,"batt":87,"charge":true,"alarm":"sos","attributes":{"hdop":0.9,"fix":"3d"}}"#
        )
        #expect(
            p
                == Position(
                    device: "gps-bow", timeMs: now - 60_000, lat: 59.5, lon: 10.25, speed: 3.5, course: 180,
                    altitude: 12,
                    accuracy: 4, battery: 87, charging: true, alarm: "sos",
                    attributes: [Attribute("hdop", .number(0.9)), Attribute("fix", .string("3d"))]))
    }

    @Test func aliasesAndNumericTimes() throws {
        let a = try position(#"{"id":"a","time":1784953740,"lat":1,"lon":2,"track":90,"eph":5}"#)
        #expect(a.device == "a")
        #expect(a.timeMs == now - 60_000)
        #expect(a.course == 90)
        #expect(a.accuracy == 5)
        let b = try position(#"{"time":1784953740500,"lat":1,"lon":2,"bearing":45}"#, device: "hello-device")
        #expect(b.device == "hello-device")
        #expect(b.timeMs == now - 59_500)
        #expect(b.course == 45)
    }

    @Test func unknownScalarKeysBecomeAttributes() throws {
        let p = try position(#"{"device":"a","time":1784953740,"lat":1,"lon":2,"ignition":true,"rpm":900}"#)
        #expect(p.attributes == [Attribute("ignition", .bool(true)), Attribute("rpm", .number(900))])
    }

    /// Found by the fuzzer: an attribute named "" was accepted and then could not be sent.
    @Test func namelessAttributesAreRefused() {
        for line in [
            #"{"device":"x","time":1784953800,"lat":1,"lon":2,"attributes":{"":12.5}}"#,
            #"{"device":"x","time":1784953800,"lat":1,"lon":2,"":true}"#,
        ] {
            #expect {
                try decoder.decode(line)
            } throws: { error in
                (error as? IngestError)?.description.contains("needs a name") == true
            }
        }
    }

    @Test func gpsdTPV() throws {
        let p = try position(
            #"{"class":"TPV","device":"/dev/ttyUSB0","mode":3,"time":"2026-07-25T04:29:59.000Z","lat":59.1,"lon":10.2,"altHAE":40.5,"speed":1.2,"track":270.1,"eph":3.2}"#,
            device: "gps-mast")
        #expect(p.device == "gps-mast")
        #expect(p.timeMs == now - 1000)
        #expect(p.altitude == nil, "altHAE alone is above the ellipsoid, not the sea: left out")
        #expect(p.course == 270.1)
        #expect(p.accuracy == 3.2)
        // The same receiver as NMEA GGA read it: 12 m above the sea, the geoid 40 m above the ellipsoid there.
        let both = try position(
            #"{"class":"TPV","mode":3,"time":"2026-07-25T04:29:59.000Z","lat":59.1,"lon":10.2,"altHAE":52.0,"altMSL":12.0,"geoidSep":40.0}"#,
            device: "g")
        #expect(both.altitude == 12)
        let converted = try position(
            #"{"class":"TPV","mode":3,"time":"2026-07-25T04:29:59.000Z","lat":59.1,"lon":10.2,"altHAE":52.0,"geoidSep":40.0}"#,
            device: "g")
        #expect(converted.altitude == 12)
        let old = try position(
            #"{"class":"TPV","mode":3,"time":"2026-07-25T04:29:59.000Z","lat":59.1,"lon":10.2,"alt":12.0}"#, device: "g"
        )
        #expect(old.altitude == 12, "gpsd before 3.20: alt is above mean sea level")
        // A cycle without a fix stores nothing, and tells the integrity watch its receiver lost it.
        #expect(
            try decoder.decode(#"{"class":"TPV","device":"/dev/ttyS0","mode":1,"time":"2026-07-25T04:29:59.000Z"}"#)
                == .gnss(device: "/dev/ttyS0", .noFix))
        #expect(try decoder.decode(#"{"class":"DEVICES","devices":[]}"#) == .skip("class DEVICES"))
    }

    /// gpsd's SKY: each satellite's C/N0 (`ss`, 0 for one not heard) and whether the fix used it.
    @Test func gpsdSKY() throws {
        let report =
            #"{"class":"SKY","device":"/dev/ttyS0","hdop":1.2,"satellites":[{"PRN":5,"ss":41.5,"used":true},{"PRN":9,"ss":33,"used":false},{"PRN":12,"ss":0,"used":false},{"PRN":20}]}"#
        #expect(
            try decoder.decode(report)
                == .gnss(device: "/dev/ttyS0", .sky(GNSSSample.Sky(cn0: [41.5, 33], inView: 4, used: 1, hdop: 1.2))))
        #expect(
            try decoder.decode(#"{"class":"SKY","satellites":[]}"#, defaultDevice: "gps-bow")
                == .gnss(device: "gps-bow", .sky(GNSSSample.Sky(cn0: [], inView: 0, used: 0))))
        #expect(
            try decoder.decode(#"{"class":"SKY","device":"/dev/ttyS0","hdop":1.2}"#) == .skip("sky without satellites"))
        let many = "[" + Array(repeating: #"{"ss":40}"#, count: 256).joined(separator: ",") + "]"
        for (bad, says) in [
            (#"{"class":"SKY","satellites":[{"ss":120}]}"#, "satellites[0].ss: 120.0 is not a C/N0"),
            (#"{"class":"SKY","satellites":[{"ss":"nan"}]}"#, "satellites[0].ss: nan is not a C/N0"),
            (#"{"class":"SKY","satellites":[{"ss":-3}]}"#, "satellites[0].ss: -3.0 is not a C/N0"),
            (#"{"class":"SKY","hdop":-1,"satellites":[]}"#, "hdop: -1.0 is not a dilution of precision"),
            (#"{"class":"SKY","satellites":{"ss":40}}"#, "satellites: expected an array"),
            (#"{"class":"SKY","satellites":[40]}"#, "satellites[0]: expected an object"),
            (#"{"class":"SKY","satellites":[{"ss":40,"used":"yes"}]}"#, "satellites[0].used: expected a boolean"),
            (#"{"class":"SKY","satellites":\#(many)}"#, "satellites: 256 listed, more than any sky holds"),
        ] {
            #expect(throws: IngestError.self, "\(bad)") { try decoder.decode(bad) }
            do {
                _ = try decoder.decode(bad)
            } catch {
                #expect(error.message.hasPrefix(says), "\(error.message) for \(bad.prefix(60))")
            }
        }
    }

    @Test func hello() throws {
        #expect(
            try decoder.decode(#"{"hello":{"device":"gps-bow","ack":true}}"#) == .hello(device: "gps-bow", ack: true))
        #expect(throws: IngestError.self) { try decoder.decode(#"{"hello":{"device":"x","acks":true}}"#) }
    }

    @Test func osmAndQuery() throws {
        let p = try position(
            "/?id=gps-bow&timestamp=1784953740&lat=59.5&lon=10.25&speed=10&bearing=90&altitude=5&accuracy=3&batt=50&charge=true&alarm=sos&hdop=1.5&driver=bob"
        )
        #expect(p.device == "gps-bow")
        #expect(p.timeMs == now - 60_000)
        #expect(abs(p.speed! - 10 * 1852.0 / 3600.0) < 1e-9)
        #expect(p.course == 90)
        #expect(p.charging == true)
        #expect(p.alarm == "sos")
        #expect(p.attributes == [Attribute("hdop", .number(1.5)), Attribute("driver", .string("bob"))])
        let q = try position("id=x&timestamp=2026-07-25T04%3A29%3A00Z&location=1.5,2.5")
        #expect(q.lat == 1.5 && q.lon == 2.5 && q.timeMs == now - 60_000)
    }

    @Test(arguments: [
        (#"{"device":"a","time":1784953740,"lat":1,"lon":2"#, "parse"),
        (#"{"device":"a","time":1784953740,"lat":"north","lon":2}"#, "parse"),
        (#"{"device":"a","time":1784953740,"lon":2}"#, "parse"),
        (#"{"device":"a","time":1784953740,"lat":91,"lon":2}"#, "range"),
        (#"{"device":"a","time":1784953740,"lat":1,"lon":-180.5}"#, "range"),
        (#"{"device":"a","time":1784953740,"lat":1,"lon":2,"batt":101}"#, "range"),
        (#"{"device":"a","lat":1,"lon":2}"#, "time"),
        (#"{"device":"a","time":"yesterday","lat":1,"lon":2}"#, "time"),
        (#"{"device":"a","time":1784954500,"lat":1,"lon":2}"#, "time"),
        (#"{"time":1784953740,"lat":1,"lon":2}"#, "device"),
        (#"{"device":"","time":1784953740,"lat":1,"lon":2}"#, "device"),
        ("id=a&timestamp=1784953740&lat=NaN&lon=2", "range"),
        ("id=a&timestamp=1784953740&lat=abc&lon=2", "parse"),
        ("hello world", "parse"),
        ("!AIVDM,1,1,,A,13aEOK?P00PD2wVMdLDRhgvL289?,0*26", "unsupported"),
        ("$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*00", "checksum"),
        ("[1,2,3]", "parse"),
    ])
    func rejections(line: String, code: String) {
        // Through the session, where a decoded position is validated (range, future time).
        let rules = IngestSession.Rules(
            decoder: decoder, clock: IngestClock(wallMs: { [now] in now }, monotonicMs: { 0 }), maxLineBytes: 8192)
        var session = IngestSession(rules: rules)
        let actions = Array(line.utf8).withUnsafeBufferPointer { session.receive(line: $0) }
        guard case .reject(let error, _)? = actions.first else {
            Issue.record("\(line) was not refused: \(actions)")
            return
        }
        #expect(error.code == code, "\(line): \(error)")
    }

    @Test func nmeaLinesBecomeSentencesEvenAfterBinaryJunk() throws {
        guard
            case .nmea(let sentence) = try decoder.decode(
                "$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,")
        else {
            Issue.record("not NMEA")
            return
        }
        #expect(sentence.talker == "GP" && sentence.type == "GGA")
        guard case .nmea(let after)? = try? decoder.decode("\u{01}\u{02}\u{7F}$GNRMC,1,V") else {
            Issue.record("junk before $ not skipped")
            return
        }
        #expect(after.type == "RMC")
        #expect(try decoder.decode("\u{01}\u{02}\u{03}") == .skip("binary"))
    }

    @Test func blankLinesAreSkipped() throws {
        #expect(try decoder.decode("   \r") == .skip("empty"))
    }
}

@Suite(.offThePool) struct OsmAndQueryTests {
    @Test func encodesFormBodyInTraccarUnits() {
        let p = Position(
            device: "gps bow/1", timeMs: 1_784_953_800_000, lat: 59.5, lon: -10.25, speed: 5.144444444444445,
            course: 90,
            altitude: 12.5, accuracy: 3, battery: 80, charging: true, alarm: "sos",
            attributes: [Attribute("ignition", .bool(true)), Attribute("id", .string("spoof"))])
        #expect(
            OsmAndQuery.encode(p)
                == "id=gps%20bow%2F1&timestamp=1784953800&lat=59.5&lon=-10.25&speed=10&bearing=90&altitude=12.5&accuracy=3&batt=80&charge=true&alarm=sos&ignition=true"
        )
    }

    @Test func millisecondTimesKeepTheirMilliseconds() {
        let p = Position(device: "a", timeMs: 1_784_953_800_250, lat: 1, lon: 2)
        #expect(OsmAndQuery.encode(p) == "id=a&timestamp=1784953800250&lat=1&lon=2")
        #expect(OsmAndQuery.timestamp("1784953800250") == 1_784_953_800_250)
    }

    @Test func percentCodingRoundTrips() {
        let text = "a b&c=d/é+%"
        #expect(OsmAndQuery.percentDecode(OsmAndQuery.percentEncode(text)) == text)
        #expect(OsmAndQuery.percentDecode("a+b%20c") == "a b c")
    }
}

import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Synchronization
import Testing

/// One collector's session without a socket: lines in, actions and replies out, on a clock
/// the test moves.
@Suite(.offThePool) struct IngestSessionTests {
    let clock = ManualClock()

    func session(router: SourceRouter? = nil) -> IngestSession {
        IngestSession(
            rules: IngestSession.Rules(
                decoder: LineDecoder(maxFutureSeconds: 600), router: router,
                clock: clock.ingestClock, maxLineBytes: 1024))
    }

    func receive(_ line: String, _ session: inout IngestSession) -> [IngestSession.Action] {
        Array(line.utf8).withUnsafeBufferPointer { session.receive(line: $0) }
    }

    func replies(_ session: inout IngestSession) -> [String] {
        var output: [UInt8] = []
        session.collectReplies(into: &output)
        return String(decoding: output, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// The stores the actions ask for, answered with consecutive seqs from `first`.
    func store(_ actions: [IngestSession.Action], _ session: inout IngestSession, first: Int64 = 1) -> [[Position]] {
        var seq = first
        var stored: [[Position]] = []
        for case .store(let positions, let ticket) in actions {
            stored.append(positions)
            session.stored(ticket, .success(seq))
            seq += 1
        }
        return stored
    }

    @Test func repliesComeInLineOrderOnceEachIsKnown() {
        var s = session()
        #expect(receive(#"{"hello":{"device":"gps-bow","ack":true}}"#, &s).isEmpty)
        let first = receive(#"{"time":"2026-07-25T04:29:00Z","lat":59.9,"lon":10.7}"#, &s)
        guard case .store(let positions, let ticket)? = first.first else {
            Issue.record("no store: \(first)")
            return
        }
        #expect(positions.map(\.device) == ["gps-bow"])
        // A refusal after a line still waiting for its commit waits behind it.
        #expect(receive("lat=north", &s).count == 1)
        #expect(replies(&s) == ["skip hello"])
        #expect(s.unresolved == 1)
        s.stored(ticket, .success(41))
        let answered = replies(&s)
        #expect(answered.count == 2 && answered[0] == "ok 41" && answered[1].hasPrefix("err "), "\(answered)")
    }

    /// On the relay's clock (`IngestClock(_:)`), a wall clock set back an hour does not make the
    /// fixes of a collector that was right look an hour ahead: ingest's wall time keeps to where
    /// the monotonic time has carried it. A step forward counts at once.
    @Test func aRelayClockSetBackDoesNotRefuseFixesThatWereRight() {
        let relayClock = SimulatedClock(wallMs: 1_784_953_800_000) // 2026-07-25T04:30:00Z
        var s = IngestSession(
            rules: IngestSession.Rules(
                decoder: LineDecoder(maxFutureSeconds: 600), clock: IngestClock(relayClock), maxLineBytes: 1024))
        _ = receive(#"{"hello":{"device":"gps-bow","ack":false}}"#, &s)
        relayClock.advance(by: .seconds(60))
        relayClock.stepWall(byMs: -3_600_000)
        guard case .store? = receive(#"{"time":"2026-07-25T04:31:00Z","lat":59,"lon":10}"#, &s).first else {
            Issue.record("a fix of the true time was refused after the relay's clock was set back")
            return
        }
        guard case .reject(let ahead, _)? = receive(#"{"time":"2026-07-25T04:42:00Z","lat":59,"lon":10}"#, &s).first
        else {
            Issue.record("a fix eleven minutes ahead of the carried time was not refused")
            return
        }
        #expect(ahead.code == "time")
        relayClock.stepWall(byMs: 2 * 3_600_000)
        guard case .store? = receive(#"{"time":"2026-07-25T05:35:00Z","lat":59,"lon":10}"#, &s).first else {
            Issue.record("a step forward of the relay's clock was not taken at once")
            return
        }
    }

    @Test func everyFormIsValidatedInOnePlaceAgainstTheInjectedClock() {
        var s = session()
        _ = receive(#"{"hello":{"device":"gps-bow","ack":true}}"#, &s)
        // Eleven minutes ahead of the clock: refused, in each form, until the clock catches up.
        let ahead = "2026-07-25T04:41:00Z"
        for line in [
            #"{"time":"\#(ahead)","lat":59,"lon":10}"#, "id=gps-bow&timestamp=\(ahead)&lat=59&lon=10",
            #"{"class":"TPV","mode":3,"time":"\#(ahead)","lat":59,"lon":10}"#,
        ] {
            guard case .reject(let error, _)? = receive(line, &s).first else {
                Issue.record("\(line) was not refused")
                continue
            }
            #expect(error.code == "time")
        }
        let phone = IngestSession.PhoneRequest(
            isJSON: false, target: "/?id=p&timestamp=\(ahead)&lat=59&lon=10", body: [])
        guard case .reject(let error, _) = s.receive(phone: phone) else {
            Issue.record("the phone's position was not refused")
            return
        }
        #expect(error.code == "time")
        clock.advance(ms: 5 * 60_000)
        guard case .store = s.receive(phone: phone) else {
            Issue.record("the phone's position was refused with the clock caught up")
            return
        }
        #expect(
            replies(&s) == ["skip hello"]
                + Array(
                    repeating:
                        "err time fix time 2026-07-25T04:41:00.000Z is more than 600 s ahead of the relay's clock",
                    count: 3))
        // Out of range in a fix cycle: NMEA is checked by the same rules (RMC's own bounds aside).
        guard
            case .reject(let range, _)? = receive(#"{"time":"2026-07-25T04:29:00Z","lat":59,"lon":10,"speed":-1}"#, &s)
                .first
        else {
            Issue.record("a negative speed was not refused")
            return
        }
        #expect(range.code == "range")
    }

    @Test func aFixCycleIsAnsweredTogetherAndEndsWhenTheReceiverGoesQuiet() {
        var s = session()
        _ = receive(#"{"hello":{"device":"gps-bow","ack":true}}"#, &s)
        // One whole cycle teaches the session which sentences make one up; the next RMC ends it.
        var stored: [[Position]] = []
        stored += store(receive("$GPRMC,042900.00,A,5930.000,N,01042.000,E,010.0,090.0,250726,,,A", &s), &s, first: 1)
        stored += store(receive("$GPGGA,042900.00,5930.000,N,01042.000,E,1,09,0.8,12.0,M,20.0,M,,", &s), &s, first: 1)
        #expect(stored.isEmpty, "the first cycle is held until it is known to be complete")
        stored += store(receive("$GPRMC,042901.00,A,5930.010,N,01042.000,E,010.0,090.0,250726,,,A", &s), &s, first: 1)
        #expect(stored.count == 1 && stored[0][0].altitude == 12 && stored[0][0].lat == 59.5)
        #expect(replies(&s) == ["skip hello", "ok 1", "ok 1"])
        // The second cycle's GGA never comes: the cycle ends once the receiver has been quiet 1.5 s.
        #expect(s.holdsCycle)
        clock.advance(ms: 1499)
        #expect(s.tick().isEmpty)
        clock.advance(ms: 1)
        let ended = store(s.tick(), &s, first: 2)
        #expect(ended.count == 1 && ended[0][0].timeMs == 1_784_953_741_000)
        #expect(!s.holdsCycle && s.unresolved == 0)
        #expect(replies(&s) == ["ok 2"])
    }

    @Test func nmeaWithoutAHelloIsRefusedAndAcksOffAreLogged() {
        var s = session()
        guard
            case .reject(let error, let log)? = receive(
                "$GPRMC,042900.00,A,5930.000,N,01042.000,E,010.0,090.0,250726,,,A", &s
            ).first
        else {
            Issue.record("not refused")
            return
        }
        #expect(error.code == "device")
        #expect(log == "rejected line (device): NMEA sentences need a hello with a device first")
        guard case .reject(_, let logged)? = receive("id=x&lat=abc&lon=2", &s).first else {
            Issue.record("not refused")
            return
        }
        #expect(logged?.hasSuffix(#" in "id=x&lat=abc&lon=2""#) == true)
        #expect(replies(&s).isEmpty, "acks are off")
    }

    /// A phone listed as a source of a multi-receiver device must be routed
    /// to the device as a collector is (the phone path once never asked the router).
    @Test func aPhoneListedAsADevicesSourceIsRoutedToTheDevice() {
        let router = SourceRouter(
            devices: [Configuration.DeviceSources(id: "boat", sources: ["gps-bow", "phone-a"])], logger: .disabled)
        let s = session(router: router)
        let phone = IngestSession.PhoneRequest(
            isJSON: false, target: "/?id=phone-a&timestamp=1784953740&lat=59.5&lon=10.5", body: [])
        guard case .store(let positions, let ticket) = s.receive(phone: phone) else {
            Issue.record("the phone's position was refused")
            return
        }
        #expect(positions.map(\.device) == ["phone-a", "boat"])
        #expect(positions.last?.attributes == [Attribute("source", .string("phone-a"))])
        #expect(ticket.lines.isEmpty, "a phone's answer is its HTTP status, not a reply line")
        // The same router for the socket's sessions: a collector's line is routed the same way.
        var collector = session(router: router)
        let routed = store(
            receive(#"{"device":"phone-a","time":1784953741,"lat":59.5,"lon":10.5}"#, &collector), &collector)
        #expect(routed.first?.map(\.device) == ["phone-a", "boat"])
    }

    /// Two receivers' NMEA collectors through one router, one of them meaconed 3.2 km away
    /// (`gnss_voyage.py --attack jump`): the vessel's positions come from the other receiver,
    /// flagged, with one `tampering` alarm, and nothing of either receiver is dropped.
    @Test func aMeaconedReceiverOnOneCollectorIsSeenThroughTheSessions() throws {
        let voyage = try GNSSVoyage(["--attack", "jump", "--seconds", "660", "--at", "600"])
        let router = SourceRouter(
            devices: [Configuration.DeviceSources(id: "boat", sources: ["gps1", "gps2"])], logger: .disabled)
        let relayClock = SimulatedClock(wallMs: 1_784_953_800_000)
        let rules = IngestSession.Rules(
            decoder: LineDecoder(maxFutureSeconds: 600), router: router, clock: IngestClock(relayClock),
            maxLineBytes: 1024)
        var sessions = ["gps1": IngestSession(rules: rules), "gps2": IngestSession(rules: rules)]
        for (name, _) in sessions { _ = receive(#"{"hello":{"device":"\#(name)","ack":false}}"#, &sessions[name]!) }
        var stored: [Position] = []
        var elapsed: Int64 = 0
        for line in voyage.lines {
            relayClock.advance(by: .milliseconds(line.atMs - elapsed))
            elapsed = line.atMs
            stored += store(receive(line.sentence, &sessions[line.receiver]!), &sessions[line.receiver]!).flatMap { $0 }
        }
        let boat = stored.filter { $0.device == "boat" }
        let attackMs = 1_784_953_800_000 + (voyage.evidenceMs ?? 0)
        #expect(stored.filter { $0.device == "gps1" }.count >= 659, "every fix of the meaconed receiver is stored")
        #expect(
            boat.filter { $0.timeMs >= attackMs }.allSatisfy {
                $0.attributes.contains(Attribute("source", .string("gps2")))
            },
            "the meaconed receiver passed over from its first false fix")
        #expect(boat.compactMap(\.alarm) == ["tampering"])
        let flaggedFrom = try #require(
            boat.first { $0.attributes.contains(Attribute("integrity", .string("spoofed"))) })
        #expect(flaggedFrom.timeMs - attackMs <= 5_000, "flagged \(flaggedFrom.timeMs - attackMs) ms after the jump")
    }

    /// Both receivers jammed, as gpsd reports them to one collector (`gnss_voyage.py --format
    /// gpsd`): their SKY reports' C/N0 falls and their TPVs lose the fix, and the vessel is jammed
    /// within 5 s of it showing, as from their NMEA; sailing clean the same way, nothing.
    @Test func jammingSeenInGpsdsSkyReportsIsJammed() throws {
        func run(_ arguments: [String]) throws -> (transitions: [(ms: Int64, to: IntegrityState)], voyage: GNSSVoyage) {
            let voyage = try GNSSVoyage(["--format", "gpsd"] + arguments)
            let relayClock = SimulatedClock(wallMs: 1_784_953_800_000)
            let seen = Mutex<[(ms: Int64, to: IntegrityState)]>([])
            let router = SourceRouter(
                devices: [Configuration.DeviceSources(id: "boat", sources: ["gps1", "gps2"])], logger: .disabled,
                changed: { _, transition in
                    seen.withLock { $0.append((relayClock.monotonicMs() - 1_000, transition.to)) }
                })
            let rules = IngestSession.Rules(
                decoder: LineDecoder(maxFutureSeconds: 600), router: router, clock: IngestClock(relayClock),
                maxLineBytes: 4096)
            var gpsd = IngestSession(rules: rules)
            var elapsed: Int64 = 0
            for line in voyage.lines {
                relayClock.advance(by: .milliseconds(line.atMs - elapsed))
                elapsed = line.atMs
                _ = store(receive(line.sentence, &gpsd), &gpsd)
            }
            return (seen.withLock { $0 }, voyage)
        }
        let jammed = try run(["--attack", "jam", "--victims", "2", "--seconds", "660", "--at", "600"])
        let evidenceMs = try #require(jammed.voyage.evidenceMs)
        let first = try #require(jammed.transitions.first { $0.to == .jammed }, "\(jammed.transitions)")
        print("integrity: jamming both, from gpsd's reports: jammed \(first.ms - evidenceMs) ms after it showed")
        #expect(first.ms - evidenceMs <= 5_000, "\(jammed.transitions), evidence at \(evidenceMs)")
        #expect(jammed.transitions.allSatisfy { $0.to < .spoofed }, "\(jammed.transitions)")
        let clean = try run(["--seconds", "300"])
        #expect(clean.transitions.isEmpty, "sailing clean: \(clean.transitions)")
    }

    /// A collector's buffered history is not a replay: two receivers live, then silent for ten
    /// minutes while their collector buffers, then its buffer at once and live again; and a
    /// receiver whose first lines are three hours of fixes three minutes apart. Their clocks
    /// step against the relay's only towards its wall clock, so nothing is suspect and the
    /// vessel stays ok; the same receivers replaying five minutes old fixes live are spoofed.
    @Test func aCollectorsBufferedHistoryIsNoReplay() throws {
        let startS: Int64 = 1_784_953_800
        func fix(_ receiver: String, _ second: Int64) -> String {
            let lat = 59.0 + Double(second) * 4.5e-5 + (receiver == "gps2" ? 9e-5 : 0)
            return
                #"{"device":"\#(receiver)","time":\#(startS + second),"lat":\#(lat),"lon":10.9,"speed":5.0,"course":0}"#
        }
        func run(_ script: (_ send: (String, Int64) -> Void, _ wait: (Duration) -> Void) -> Void) -> [IntegrityState] {
            let relayClock = SimulatedClock(wallMs: startS * 1000)
            let seen = Mutex<[IntegrityState]>([])
            let router = SourceRouter(
                devices: [Configuration.DeviceSources(id: "boat", sources: ["gps1", "gps2"])], logger: .disabled,
                changed: { _, transition in seen.withLock { $0.append(transition.to) } })
            let rules = IngestSession.Rules(
                decoder: LineDecoder(maxFutureSeconds: 600), router: router, clock: IngestClock(relayClock),
                maxLineBytes: 1024)
            var session = IngestSession(rules: rules)
            let send = { (receiver: String, second: Int64) in
                _ = store(receive(fix(receiver, second), &session), &session)
            }
            script(send, { relayClock.advance(by: $0) })
            return seen.withLock { $0 }
        }
        let buffered = run { send, wait in
            for second in Int64(0)..<60 {
                send("gps1", second)
                send("gps2", second)
                wait(.seconds(1))
            }
            wait(.seconds(600)) // the collector's own outage: it buffers
            for second in Int64(60)..<660 {
                send("gps1", second)
                send("gps2", second)
                wait(.milliseconds(1))
            }
            wait(.milliseconds(400))
            for second in Int64(661)..<700 {
                send("gps1", second)
                send("gps2", second)
                wait(.seconds(1))
            }
        }
        #expect(buffered.isEmpty, "a collector's buffer after its outage: \(buffered)")
        let history = run { send, wait in
            wait(.seconds(3 * 3600))
            for step in Int64(0)..<60 {
                send("gps1", step * 180)
                send("gps2", step * 180)
                wait(.milliseconds(2))
            }
        }
        #expect(history.isEmpty, "three hours of history, three minutes apart: \(history)")
        let replayed = run { send, wait in
            for second in Int64(300)..<360 {
                send("gps1", second)
                send("gps2", second)
                wait(.seconds(1))
            }
            for second in Int64(60)..<80 {
                send("gps1", second)
                send("gps2", second)
                wait(.seconds(1))
            }
        }
        #expect(replayed.first == .spoofed, "both receivers replaying 5 minutes back, live: \(replayed)")
    }
}

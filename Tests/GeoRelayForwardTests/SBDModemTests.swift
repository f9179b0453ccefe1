import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The modem's AT dialogue, line by line, as a 9603 answers (Iridium's ISU AT Command Reference):
/// each exchange's bytes out, each answer's meaning, and every way one ends early.
@Suite(.offThePool) struct SBDModemTests {
    static let t0 = RelayInstant.origin + .seconds(1000)

    /// What the machine wrote, as text.
    static func writes(_ actions: [SBDModem.Action]) -> [String] {
        actions.compactMap { if case .write(let bytes) = $0 { String(decoding: bytes, as: UTF8.self) } else { nil } }
    }

    static func events(_ actions: [SBDModem.Action]) -> [SBDModem.Event] {
        actions.compactMap { if case .report(let event) = $0 { event } else { nil } }
    }

    /// A modem set up and idle.
    static func started(_ settings: SBDModem.Settings = .init()) -> SBDModem {
        var modem = SBDModem(settings: settings)
        _ = modem.start(now: t0)
        for _ in 0..<4 { _ = modem.received(Array("\r\nOK\r\n".utf8), now: t0) }
        let actions = modem.received(Array("\r\n0\r\n\r\nOK\r\n".utf8), now: t0)
        precondition(events(actions) == [.ready] && modem.isIdle)
        return modem
    }

    @Test func setUpEchoOffFlowControlOffIndicationsOnAndTheBufferCleared() {
        var modem = SBDModem()
        var written = Self.writes(modem.start(now: Self.t0))
        // The first command is echoed (echo is on until ATE0 takes): the echo is not its answer.
        written += Self.writes(modem.received(Array("ATE0\r\r\nOK\r\n".utf8), now: Self.t0))
        for _ in 0..<3 { written += Self.writes(modem.received(Array("\r\nOK\r\n".utf8), now: Self.t0)) }
        #expect(written == ["ATE0\r", "AT&K0\r", "AT+SBDMTA=0\r", "AT+CIER=1,1,1\r", "AT+SBDD0\r"])
        let last = modem.received(Array("\r\n0\r\n\r\nOK\r\n".utf8), now: Self.t0)
        #expect(Self.events(last) == [.ready] && modem.isIdle && modem.deadline == nil)

        var wired = SBDModem.Settings()
        wired.flowControl = true
        wired.ringAlerts = true
        var other = SBDModem(settings: wired)
        _ = other.start(now: Self.t0)
        let second = Self.writes(other.received(Array("OK\r\n".utf8), now: Self.t0))
        let third = Self.writes(other.received(Array("OK\r\n".utf8), now: Self.t0))
        #expect(second == ["AT&K3\r"] && third == ["AT+SBDMTA=1\r"])
    }

    /// A message written with its checksum, a session that sends it, and the MO buffer cleared,
    /// whether the modem's bytes come in one read or one at a time.
    @Test(arguments: [false, true])
    func aMessageIsWrittenSentAndClearedFromTheModem(byteAtATime: Bool) {
        var modem = Self.started()
        let message: [UInt8] = [0x01, 0xFF, 0x80, 0x7F] + Array(repeating: 0xFE, count: 300)
        func feed(_ text: String) -> [SBDModem.Action] {
            guard byteAtATime else { return modem.received(Array(text.utf8), now: Self.t0) }
            return text.utf8.flatMap { modem.received([$0], now: Self.t0) }
        }
        #expect(Self.writes(modem.send(message, now: Self.t0)) == ["AT+SBDWB=304\r"])
        let data = feed("READY\r\n")
        let sum = message.reduce(0) { $0 + Int($1) } & 0xFFFF
        #expect(data == [.write(message + [UInt8(sum >> 8), UInt8(sum & 0xFF)])])
        #expect(Self.writes(feed("0\r\n\r\nOK\r\n")) == ["AT+SBDIX\r"])
        #expect(modem.deadline == Self.t0 + .seconds(120), "a session's answer may take up to two minutes")
        let session = feed("+SBDIX: 0, 12, 0, 0, 0, 0\r\n\r\nOK\r\n")
        #expect(Self.events(session) == [.session(SBDSessionResult(moStatus: 0, momsn: 12))])
        // Sent: cleared at once, or the next session would send and bill it again.
        #expect(Self.writes(session) == ["AT+SBDD0\r"])
        #expect(feed("0\r\n\r\nOK\r\n").isEmpty)
        #expect(modem.isIdle)
    }

    @Test func aFailedSessionKeepsTheMessageForTheNextAndSaysWhenToTry() {
        var modem = Self.started()
        _ = modem.send([1, 2, 3], now: Self.t0)
        _ = modem.received(Array("READY\r\n".utf8), now: Self.t0)
        _ = modem.received(Array("0\r\nOK\r\n".utf8), now: Self.t0)
        let session = modem.received(Array("+SBDIX: 32, 12, 2, 0, 0, 0\r\nOK\r\n".utf8), now: Self.t0)
        #expect(Self.writes(session).isEmpty, "no clear: the message is still to go")
        guard case .session(let result) = Self.events(session).first else {
            Issue.record("no session result")
            return
        }
        #expect(result.outcome == .retry(after: .seconds(60), reason: "no network service (32)"))
        #expect(modem.isIdle)
    }

    /// Each way an exchange ends without its answer: idle again, with why.
    @Test(arguments: [
        ("READY\r\n1\r\nOK\r\n", "timed out waiting for the message's bytes"),
        ("READY\r\n2\r\nOK\r\n", "checksum wrong"),
        ("READY\r\n3\r\nOK\r\n", "refused the message's size"),
        ("ERROR\r\n", "answered ERROR to AT+SBDWB=3"),
        ("READY\r\n0\r\nOK\r\nERROR\r\n", "answered ERROR to AT+SBDIX"),
    ])
    func anExchangeThatFailsEndsIdleWithWhy(script: String, why: String) {
        var modem = Self.started()
        _ = modem.send([1, 2, 3], now: Self.t0)
        let events = Self.events(modem.received(Array(script.utf8), now: Self.t0))
        #expect(events.count == 1 && modem.isIdle && modem.deadline == nil, "\(events)")
        guard case .failed(let reason) = events.first else { return }
        #expect(reason.contains(why), "\(reason)")
    }

    @Test func aSessionWithNoAnswerTimesOutAtItsDeadline() {
        var modem = Self.started()
        _ = modem.send([1, 2, 3], now: Self.t0)
        _ = modem.received(Array("READY\r\n0\r\nOK\r\n".utf8), now: Self.t0)
        let deadline = try! #require(modem.deadline)
        #expect(modem.timedOut(now: deadline - .seconds(1)).isEmpty, "not before its deadline")
        let events = Self.events(modem.timedOut(now: deadline))
        #expect(events == [.failed("the modem did not answer AT+SBDIX within its time")])
        #expect(modem.isIdle)
        // What the modem says late belongs to no exchange.
        #expect(modem.received(Array("+SBDIX: 0, 1, 0, 0, 0, 0\r\nOK\r\n".utf8), now: deadline).isEmpty)
    }

    @Test func indicationsAndRingAlertsAreReportedWhateverIsUnderWay() {
        var modem = Self.started()
        _ = modem.send([1, 2, 3], now: Self.t0)
        let events = Self.events(
            modem.received(Array("+CIEV:0,4\r\n+CIEV:1,0\r\nSBDRING\r\n+CIEV:0,9\r\n+CIEV:2,1\r\n".utf8), now: Self.t0))
        #expect(events == [.signal(4), .service(false), .ringAlert], "out-of-range values are ignored")
        #expect(!modem.isIdle, "still waiting for READY")
    }

    @Test func signalAndIridiumTimeAreRead() {
        var modem = Self.started()
        #expect(Self.writes(modem.look(time: false, now: Self.t0)) == ["AT+CSQ\r"])
        #expect(Self.events(modem.received(Array("+CSQ:3\r\n\r\nOK\r\n".utf8), now: Self.t0)) == [.signal(3)])
        #expect(Self.writes(modem.look(time: true, now: Self.t0)) == ["AT-MSSTM\r"])
        // 0x0A1B2C3D frames of 90 ms after 2014-05-11T14:23:55Z.
        #expect(
            Self.events(modem.received(Array("-MSSTM: 0a1b2c3d\r\nOK\r\n".utf8), now: Self.t0)) == [
                .networkTime(milliseconds: 1_399_818_235_000 + 0x0A1B_2C3D * 90)
            ])
        _ = modem.look(time: true, now: Self.t0)
        #expect(
            Self.events(modem.received(Array("-MSSTM: no network service\r\nOK\r\n".utf8), now: Self.t0)) == [
                .networkTime(milliseconds: nil)
            ])
    }

    /// The MO status codes as the SBD Service Developers Guide groups them.
    @Test func everyMOStatusHasAnOutcome() {
        for status in 0...4 { #expect(SBDOutcome(moStatus: status) == .sent) }
        for status in [12, 14, 15, 16, 33, 34, 64, 65] {
            guard case .fatal = SBDOutcome(moStatus: status) else {
                Issue.record("\(status) is not fatal")
                continue
            }
        }
        for status in Array(5...11) + [13, 17, 18, 19] + Array(20...32) + Array(35...63) + [66, 255] {
            guard case .retry(let after, _) = SBDOutcome(moStatus: status) else {
                Issue.record("\(status) is not retried")
                continue
            }
            #expect(after >= .seconds(30), "\(status): retried after \(after)")
        }
        guard case .retry(let after, _) = SBDOutcome(moStatus: 36) else { return }
        #expect(after == .seconds(180))
        #expect(SBDSessionResult.parse("+SBDIX: 0, 70000, 0, 0, 0, 0") == nil, "out of range")
        #expect(SBDSessionResult.parse("+SBDIX: 0, 1, 0") == nil)
    }
}

import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The modem's dialogue over a real serial line: the relay's port on a pseudo-terminal, a fake
/// 9603 on its other end (`FakeIridiumModem`), and what reached the gateway, billed.
@Suite(.serialized, .offThePool) struct SBDModemLinkTests {
    /// Opens the fake's device as the relay opens its modem, sets it up, and runs `body` on it,
    /// off the cooperative pool (the port blocks).
    static func withLink<T: Sendable>(
        _ modem: FakeIridiumModem, _ body: @escaping @Sendable (SBDModemLink, [SBDModem.Event]) throws -> T
    ) async throws -> T {
        let path = modem.devicePath
        return try await offThePool {
            let link = SBDModemLink(port: try SBDPort(path: path, baud: 19200), clock: SystemClock())
            return try body(link, try link.start())
        }
    }

    static func outcomes(_ events: [SBDModem.Event]) -> [SBDOutcome] {
        events.compactMap { if case .session(let result) = $0 { result.outcome } else { nil } }
    }

    /// Set-up clears what a relay that died mid-way left in the modem's buffer: a session to
    /// look at the mailbox, or anything else, would otherwise send and bill it again.
    @Test func setUpTakesIndicationsAndClearsAMessageLeftInTheModem() async throws {
        let modem = try FakeIridiumModem()
        defer { modem.stop() }
        modem.setMOBuffer([1, 2, 3])
        let events = try await Self.withLink(modem) { _, started in started }
        #expect(events.contains(.ready) && events.contains(.signal(4)) && events.contains(.service(true)), "\(events)")
        #expect(modem.moBuffer == nil)
        #expect(modem.commands == ["ATE0", "AT&K0", "AT+SBDMTA=0", "AT+CIER=1,1,1", "AT+SBDD0"])
    }

    @Test func aMessageReachesTheGatewayOnceAndLeavesTheModemEmpty() async throws {
        let modem = try FakeIridiumModem()
        defer { modem.stop() }
        let message = try SBDMessage(
            relayID: 1, sequence: 1, roster: 0,
            fixes: [.init(unit: 0, timeSeconds: 1_784_953_800, lat: 59.9, lon: 10.7, alarm: "sos")]
        ).encode()
        let events = try await Self.withLink(modem) { link, _ in try link.send(message) }
        #expect(Self.outcomes(events) == [.sent])
        #expect(modem.delivered == [message])
        #expect(modem.moBuffer == nil, "cleared after the success")
    }

    /// An RF drop and a gateway that does not answer keep the message in the modem, with the sky's
    /// wait; the next session sends it, once.
    @Test func failedSessionsWaitForTheSkyAndTheMessageGoesOnce() async throws {
        let modem = try FakeIridiumModem()
        defer { modem.stop() }
        modem.update { $0.sessions = [18, 17] }
        let events = try await Self.withLink(modem) { link, _ in
            try link.send([9, 9, 9]) + link.send([9, 9, 9]) + link.send([9, 9, 9])
        }
        let outcomes = Self.outcomes(events)
        #expect(outcomes.count == 3 && outcomes.last == .sent, "\(outcomes)")
        #expect(
            outcomes.dropLast().allSatisfy {
                if case .retry(let after, _) = $0 { after == .seconds(60) } else { false }
            })
        #expect(modem.delivered == [[9, 9, 9]])
    }

    @Test func noServiceIsRetriedLaterAndAWriteTheModemRefusedSaysWhy() async throws {
        let modem = try FakeIridiumModem()
        defer { modem.stop() }
        modem.update {
            $0.service = false
            $0.writeAnswers = [2, 1]
        }
        let (checksum, timeout, noService) = try await Self.withLink(modem) { link, _ in
            (try link.send([7]), try link.send([7]), try link.send([7]))
        }
        #expect(checksum == [.failed("the modem found the message's checksum wrong")])
        #expect(timeout == [.failed("the modem timed out waiting for the message's bytes")])
        guard case .retry(_, let reason)? = Self.outcomes(noService).first else {
            Issue.record("\(noService)")
            return
        }
        #expect(reason.contains("no network service (32)"))
        #expect(modem.delivered.isEmpty)
    }

    @Test func signalAndIridiumTimeAreReadOverTheLine() async throws {
        let modem = try FakeIridiumModem()
        defer { modem.stop() }
        let (signal, time) = try await Self.withLink(modem) { link, _ in
            (try link.look(time: false), try link.look(time: true))
        }
        #expect(signal == [.signal(4)])
        #expect(time == [.networkTime(milliseconds: 1_399_818_235_000 + 0x0A1B_2C3D * 90)])
    }
}

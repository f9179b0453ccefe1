import GeoRelayCore

/// A `+SBDIX` session's answer: `+SBDIX: <MO status>, <MOMSN>, <MT status>, <MTMSN>, <MT length>,
/// <MT queued>` (Iridium's ISU AT Command Reference), and what the MO status means for the
/// relay's next session.
package struct SBDSessionResult: Sendable, Equatable {
    package var moStatus: Int
    /// The modem's count of messages it originated; after a success, this message's number.
    package var momsn: Int
    package var mtStatus: Int
    package var mtmsn: Int
    package var mtLength: Int
    /// Messages waiting at the gateway for the modem.
    package var mtQueued: Int

    package init(moStatus: Int, momsn: Int, mtStatus: Int = 0, mtmsn: Int = 0, mtLength: Int = 0, mtQueued: Int = 0) {
        self.moStatus = moStatus
        self.momsn = momsn
        self.mtStatus = mtStatus
        self.mtmsn = mtmsn
        self.mtLength = mtLength
        self.mtQueued = mtQueued
    }

    /// The answer's six numbers, each range-checked; nil for anything else.
    static func parse(_ line: Substring) -> SBDSessionResult? {
        guard line.hasPrefix("+SBDIX:") else { return nil }
        let fields = line.dropFirst("+SBDIX:".count).split(separator: ",").map { $0.filter { $0 != " " } }
        guard fields.count == 6 else { return nil }
        let numbers = fields.compactMap { Int($0) }.filter { (0...65_535).contains($0) }
        guard numbers.count == 6 else { return nil }
        return SBDSessionResult(
            moStatus: numbers[0], momsn: numbers[1], mtStatus: numbers[2], mtmsn: numbers[3], mtLength: numbers[4],
            mtQueued: numbers[5])
    }

    /// What the MO status says, grouped as the SBD Service Developers Guide groups them.
    package var outcome: SBDOutcome { SBDOutcome(moStatus: moStatus) }
}

/// What a session's MO status means: the message went, or try again after a wait the sky
/// sets, or stop trying until someone looks (the modem, its antenna or its subscription).
package enum SBDOutcome: Sendable, Equatable {
    /// 0–4: the message is at the gateway (1 and 2 add something about MT or the location update).
    case sent
    /// The gateway's or the radio's failure: the same message may go at `after` at the earliest.
    case retry(after: Duration, reason: String)
    /// Retrying cannot help: the message, the subscription or the hardware is at fault.
    case fatal(reason: String)

    /// The wait after most failed sessions: the satellites' geometry does not change sooner.
    package static let skyWait = Duration.seconds(60)

    package init(moStatus: Int) {
        switch moStatus {
        case 0...4: self = .sent
        case 10: self = .retry(after: Self.skyWait, reason: "the gateway's call did not complete in time (10)")
        case 11: self = .retry(after: .seconds(300), reason: "the gateway's MO queue is full (11)")
        case 12: self = .fatal(reason: "the message has too many segments (12)")
        case 13: self = .retry(after: Self.skyWait, reason: "the gateway reported the session incomplete (13)")
        case 14: self = .fatal(reason: "the message's segment size is invalid (14)")
        case 15: self = .fatal(reason: "access is denied: no SBD subscription for this modem (15)")
        case 16: self = .fatal(reason: "the modem is locked and may not make SBD calls (16, see +CULK)")
        case 17: self = .retry(after: Self.skyWait, reason: "the gateway did not answer (17)")
        case 18: self = .retry(after: Self.skyWait, reason: "the connection was lost (18, RF drop)")
        case 19: self = .retry(after: Self.skyWait, reason: "the link failed (19, protocol error)")
        case 32: self = .retry(after: Self.skyWait, reason: "no network service (32)")
        case 33: self = .fatal(reason: "antenna fault (33)")
        case 34: self = .fatal(reason: "the radio is disabled (34, see *Rn)")
        case 35: self = .retry(after: .seconds(30), reason: "the modem is busy (35)")
        case 36: self = .retry(after: .seconds(180), reason: "3 minutes must pass since the last registration (36)")
        case 37: self = .retry(after: .seconds(600), reason: "SBD service is temporarily disabled (37)")
        case 38: self = .retry(after: .seconds(600), reason: "a traffic management period (38, see +SBDLOE)")
        case 64: self = .fatal(reason: "band violation: the radio transmitted outside its band (64)")
        case 65: self = .fatal(reason: "PLL lock failure: a hardware error while transmitting (65)")
        default: self = .retry(after: Self.skyWait, reason: "session failed (\(moStatus), reserved)")
        }
    }
}

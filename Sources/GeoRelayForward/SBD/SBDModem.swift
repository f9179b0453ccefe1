import GeoRelayCore

/// One Iridium 9602/9603's AT dialogue (a RockBLOCK is one behind a serial port), without I/O:
/// what to write to the modem next, and what the lines it answers mean. The serial port's owner
/// writes the `.write` actions, feeds back what it reads (`received`), and calls `timedOut` at
/// `deadline`; the SBD uplink decides when to send, from the `.report` events.
///
/// As Iridium's ISU AT Command Reference has it:
/// - set-up: echo off (`ATE0`), flow control off on a three-wire link (`AT&K0`, else `AT&K3`),
///   ring alerts as configured (`AT+SBDMTA`), signal and service indications (`AT+CIER=1,1,1`,
///   then `+CIEV:0,<0-5>` and `+CIEV:1,<0|1>` lines at any time), and the MO buffer cleared;
/// - a message: `AT+SBDWB=<length>`, `READY`, the bytes and their two-byte checksum (the low 16
///   bits of their sum, high byte first), then `0` (taken), `1` (60 s passed before all bytes
///   came), `2` (checksum mismatch) or `3` (a size not 1–340);
/// - a session: `AT+SBDIX` (`AT+SBDIXA` answering a ring alert), up to a minute or more, then
///   `+SBDIX: <MO status>, …` (`SBDSessionResult`); after a success the MO buffer is cleared
///   (`AT+SBDD0`), or the modem would send and bill the same message again at the next session;
/// - looks: `AT+CSQ` (`+CSQ:<0-5>`) and `AT-MSSTM` (`-MSSTM: <hex>`, Iridium's time in 90 ms
///   frames since 2014-05-11T14:23:55Z, or `no network service`).
///
/// One exchange at a time: a command, its answer and `OK`, or `ERROR`, or its timeout.
package struct SBDModem {
    package struct Settings: Sendable, Equatable {
        /// RTS/CTS wired (`AT&K3`); a three-wire link has none (`AT&K0`).
        package var flowControl = false
        /// The modem announces mobile-terminated messages (`SBDRING`).
        package var ringAlerts = false
        /// How long a command's answer may take (a session's is `sessionTimeout`).
        package var commandTimeout = Duration.seconds(5)
        /// A session's answer: the modem gives up on its own well within it.
        package var sessionTimeout = Duration.seconds(120)

        package init() {}
    }

    package enum Action: Sendable, Equatable {
        case write([UInt8])
        case report(Event)
    }

    package enum Event: Sendable, Equatable {
        /// Set up, and idle: a message may go.
        case ready
        /// Signal strength, 0–5 bars (`+CSQ`, `+CIEV:0`).
        case signal(Int)
        /// Network service (`+CIEV:1`).
        case service(Bool)
        /// Iridium's time (`-MSSTM`) in milliseconds since 1970; nil without network service.
        case networkTime(milliseconds: Int64?)
        /// A session ended (the MO buffer already cleared when it sent the message).
        case session(SBDSessionResult)
        /// The gateway has a message for the modem (`SBDRING`).
        case ringAlert
        /// An exchange ended without its answer: `ERROR`, a write refused, a timeout. Idle again.
        case failed(String)
    }

    private enum Exchange: Equatable {
        case setup(String)
        case signal
        case time
        case writeLength([UInt8])
        case writeData
        case session(alert: Bool)
        case clear

        var command: String {
            switch self {
            case .setup(let command): command
            case .signal: "AT+CSQ"
            case .time: "AT-MSSTM"
            case .writeLength(let message): "AT+SBDWB=\(message.count)"
            case .writeData: ""
            case .session(let alert): alert ? "AT+SBDIXA" : "AT+SBDIX"
            case .clear: "AT+SBDD0"
            }
        }
    }

    private let settings: Settings
    private var queue: [Exchange] = []
    private var current: Exchange?
    /// The answer's line came (`+CSQ:`, `0`…); `OK` ends the exchange.
    private var answered: Event?
    private var announceReady = false
    private var buffer: [UInt8] = []
    package private(set) var deadline: RelayInstant?

    package init(settings: Settings = Settings()) {
        self.settings = settings
    }

    /// Nothing under way or queued: a message or a look may start.
    package var isIdle: Bool { current == nil && queue.isEmpty }

    /// Sets the modem up; `.ready` once it is.
    package mutating func start(now: RelayInstant) -> [Action] {
        queue = [
            .setup("ATE0"), .setup(settings.flowControl ? "AT&K3" : "AT&K0"),
            .setup(settings.ringAlerts ? "AT+SBDMTA=1" : "AT+SBDMTA=0"), .setup("AT+CIER=1,1,1"), .clear,
        ]
        current = nil
        announceReady = true
        return next(now: now)
    }

    /// Writes `message` to the MO buffer and sends it in a session.
    /// - Precondition: idle, and 1 to 340 bytes.
    package mutating func send(_ message: [UInt8], answeringRing: Bool = false, now: RelayInstant) -> [Action] {
        precondition(
            isIdle && (1...SBDMessage.maximumBytes).contains(message.count), "an SBD send while busy or too long")
        queue = [.writeLength(message), .session(alert: answeringRing)]
        return next(now: now)
    }

    /// Asks for the signal (`+CSQ`), or Iridium's time (`-MSSTM`). - Precondition: idle.
    package mutating func look(time: Bool, now: RelayInstant) -> [Action] {
        precondition(isIdle, "an SBD look while busy")
        queue = [time ? .time : .signal]
        return next(now: now)
    }

    /// Bytes read from the modem.
    package mutating func received(_ bytes: [UInt8], now: RelayInstant) -> [Action] {
        buffer += bytes
        var actions: [Action] = []
        while let end = buffer.firstIndex(where: { $0 == 0x0D || $0 == 0x0A }) {
            let line = String(decoding: buffer[..<end], as: UTF8.self)
            buffer.removeSubrange(...end)
            guard !line.isEmpty else { continue }
            actions += handle(Substring(line), now: now)
        }
        return actions
    }

    /// The exchange under way took too long: it ends, and the modem is idle again.
    package mutating func timedOut(now: RelayInstant) -> [Action] {
        guard let current, let deadline, now >= deadline else { return [] }
        let what = current == .writeData ? "the message's bytes" : current.command
        return finish(failed: "the modem did not answer \(what) within its time", now: now)
    }

    // MARK: - Lines

    private mutating func handle(_ line: Substring, now: RelayInstant) -> [Action] {
        if line.hasPrefix("+CIEV:") { return indication(line) }
        if line == "SBDRING" { return [.report(.ringAlert)] }
        guard let exchange = current else { return [] }
        if line == exchange.command { return [] } // the echo, before ATE0 took
        if line == "ERROR" { return finish(failed: "the modem answered ERROR to \(exchange.command)", now: now) }
        switch exchange {
        case .writeLength(let message) where line == "READY":
            current = .writeData
            deadline = now + settings.commandTimeout + .seconds(60)
            return [.write(message + Self.checksum(message))]
        case .writeData:
            switch line {
            case "0": answered = .ready
            case "1": return finish(failed: "the modem timed out waiting for the message's bytes", now: now)
            case "2": return finish(failed: "the modem found the message's checksum wrong", now: now)
            case "3": return finish(failed: "the modem refused the message's size", now: now)
            case "OK" where answered != nil:
                answered = nil
                current = nil
                return next(now: now)
            default: break
            }
            return []
        case .session:
            if let result = SBDSessionResult.parse(line) {
                answered = .session(result)
                if result.outcome == .sent { queue.append(.clear) }
            } else if line == "OK", let event = answered {
                return complete(event, now: now)
            }
            return []
        case .signal:
            if line.hasPrefix("+CSQ:"), let bars = Int(line.dropFirst(5).filter { $0 != " " }), (0...5).contains(bars) {
                answered = .signal(bars)
            } else if line == "OK", let event = answered {
                return complete(event, now: now)
            }
            return []
        case .time:
            if line.hasPrefix("-MSSTM:") {
                answered = .networkTime(milliseconds: Self.iridiumTime(line.dropFirst(7).filter { $0 != " " }))
            } else if line == "OK", let event = answered {
                return complete(event, now: now)
            }
            return []
        case .clear:
            if line == "0" || line == "1" {
                answered = line == "0" ? .ready : .failed("the modem could not clear its MO buffer")
            } else if line == "OK" {
                let event = answered
                answered = nil
                current = nil
                return (event.flatMap { $0 == .ready ? nil : [.report($0)] } ?? []) + next(now: now)
            }
            return []
        case .writeLength:
            return [] // only READY moves it on
        case .setup:
            guard line == "OK" else { return [] }
            current = nil
            return next(now: now)
        }
    }

    private mutating func indication(_ line: Substring) -> [Action] {
        let fields = line.dropFirst(6).split(separator: ",").map { Int($0.filter { $0 != " " }) }
        guard fields.count == 2, let indicator = fields[0], let value = fields[1] else { return [] }
        switch (indicator, value) {
        case (0, 0...5): return [.report(.signal(value))]
        case (1, 0...1): return [.report(.service(value == 1))]
        default: return []
        }
    }

    /// The answer's event is reported after `OK`, and the next queued exchange starts.
    private mutating func complete(_ event: Event, now: RelayInstant) -> [Action] {
        answered = nil
        current = nil
        return [.report(event)] + next(now: now)
    }

    private mutating func finish(failed reason: String, now: RelayInstant) -> [Action] {
        answered = nil
        current = nil
        queue.removeAll()
        deadline = nil
        announceReady = false
        return [.report(.failed(reason))]
    }

    private mutating func next(now: RelayInstant) -> [Action] {
        guard !queue.isEmpty else {
            deadline = nil
            guard announceReady else { return [] }
            announceReady = false
            return [.report(.ready)]
        }
        let exchange = queue.removeFirst()
        current = exchange
        if case .session = exchange {
            deadline = now + settings.sessionTimeout
        } else {
            deadline = now + settings.commandTimeout
        }
        return [.write(Array((exchange.command + "\r").utf8))]
    }

    // MARK: - Fields

    /// `AT+SBDWB`'s checksum: the low 16 bits of the bytes' sum, high byte first.
    static func checksum(_ message: [UInt8]) -> [UInt8] {
        let sum = message.reduce(0) { $0 &+ UInt16($1) }
        return [UInt8(sum >> 8), UInt8(sum & 0xFF)]
    }

    /// Iridium's epoch (era 2): 2014-05-11T14:23:55Z; its time counts 90 ms frames from it.
    static let iridiumEpochMs: Int64 = 1_399_818_235_000

    /// `-MSSTM`'s value in milliseconds since 1970: 8 hex digits of frames, or nil.
    static func iridiumTime(_ hex: String) -> Int64? {
        guard hex.count == 8, let frames = UInt32(hex, radix: 16) else { return nil }
        return iridiumEpochMs + Int64(frames) * 90
    }
}

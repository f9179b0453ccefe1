import CLinux
import Foundation
import GeoRelayCore
import GeoRelayForward
import Glibc
import Synchronization

/// An Iridium 9603 on a pseudo-terminal, answering the AT commands the relay uses as Iridium's
/// ISU AT Command Reference describes them, with the gateway behind it: a message a session
/// sends reaches `delivered` (and is billed) whether the relay meant to send it again or not.
///
/// Scriptable (`Script`): no service, the MO status of each next session (an RF drop, a gateway
/// that does not answer, a success), each next write's answer (the 60 s timeout, a bad checksum),
/// signal, and the MO buffer, which the modem keeps across the relay's restarts as a real one
/// keeps it across the host's.
package final class FakeIridiumModem: Sendable {
    package struct Script: Sendable {
        package var service = true
        /// 0–5 bars.
        package var signal = 4
        /// MO statuses the next sessions end with, in turn; when empty, 0 with service and 32 without.
        package var sessions: [Int] = []
        /// What the next writes answer after their bytes, in turn: 0 taken, 1 the bytes did not
        /// all come within 60 s, 2 their checksum is wrong; when empty, as the bytes say.
        package var writeAnswers: [Int] = []
        /// `-MSSTM`'s frames of 90 ms since Iridium's epoch.
        package var networkTimeFrames: UInt32 = 0x0A1B_2C3D

        package init() {}
    }

    private struct State {
        var script = Script()
        var echo = true
        var indications = false
        var moBuffer: [UInt8]?
        var momsn = 0
        var delivered: [[UInt8]] = []
        var commands: [String] = []
        var input: [UInt8] = []
        /// Bytes of a message `AT+SBDWB` announced: its length, checksum included.
        var awaitingBinary: Int?
    }

    private let state = Mutex(State())
    private let master: Int32
    /// The fake's own hold on the terminal, so it does not hang up between the relay's opens.
    private let slave: Int32
    private let stopped = Atomic<Bool>(false)
    package let changed = WakeSignal()
    /// The modem's device, for the relay's configuration.
    package let devicePath: String

    package init(script: Script = Script()) throws {
        let master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)
        var name = [CChar](repeating: 0, count: 128)
        guard master >= 0, grantpt(master) == 0, unlockpt(master) == 0, ptsname_r(master, &name, name.count) == 0
        else {
            throw SBDPortError("no pseudo-terminal for the fake modem")
        }
        devicePath = String(cString: name)
        slave = open(devicePath, O_RDWR | O_NOCTTY | O_CLOEXEC)
        // Raw before anyone writes: a terminal's echo would hand the fake its own answers.
        SerialLine.makeRaw(slave, speed: SerialLine.speed(19200)!)
        self.master = master
        state.withLock { $0.script = script }
        Thread { [self] in serve() }.start()
    }

    package func update(_ change: (inout Script) -> Void) { state.withLock { change(&$0.script) } }
    /// Messages that reached the gateway, in order: each one billed.
    package var delivered: [[UInt8]] { state.withLock { $0.delivered } }
    /// Waits until at least `count` messages reached the gateway, or `timeout` passes. - Returns:
    /// whether they did.
    package func waitForDelivered(_ count: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await awaitCondition(
            timeout: timeout, changed: changed, snapshot: { [delivered.count] }, { $0[0] >= count })
    }

    /// Every command line the modem received.
    package var commands: [String] { state.withLock { $0.commands } }
    package var moBuffer: [UInt8]? { state.withLock { $0.moBuffer } }
    /// A message left in the buffer, as by a relay that died before clearing it.
    package func setMOBuffer(_ bytes: [UInt8]?) { state.withLock { $0.moBuffer = bytes } }

    /// The satellite's indications, when the relay asked for them (`AT+CIER`).
    package func indicate(signal: Int? = nil, service: Bool? = nil) {
        let on = state.withLock { state in
            if let signal { state.script.signal = signal }
            if let service { state.script.service = service }
            return state.indications
        }
        guard on else { return }
        if let signal { reply("+CIEV:0,\(signal)\r\n") }
        if let service { reply("+CIEV:1,\(service ? 1 : 0)\r\n") }
    }

    package func stop() {
        stopped.store(true, ordering: .releasing)
    }

    deinit {
        close(master)
        close(slave)
    }

    // MARK: - The modem

    private func serve() {
        var buffer = [UInt8](repeating: 0, count: 1024)
        while !stopped.load(ordering: .acquiring) {
            var descriptor = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 50) > 0 else { continue }
            let n = buffer.withUnsafeMutableBytes { read(master, $0.baseAddress, $0.count) }
            guard n > 0 else {
                usleep(5_000)
                continue
            }
            state.withLock { $0.input += buffer[..<n] }
            while let answer = nextAnswer() { reply(answer) }
            changed.signal()
        }
    }

    private func reply(_ text: String) {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
            guard n > 0 else { return }
            offset += n
        }
    }

    /// The answer to the next whole command (or message) in the input, if one is there.
    private func nextAnswer() -> String? {
        state.withLock { state -> String? in
            if let length = state.awaitingBinary {
                guard state.input.count >= length else { return nil }
                let bytes = Array(state.input.prefix(length))
                state.input.removeFirst(length)
                state.awaitingBinary = nil
                let message = Array(bytes.dropLast(2))
                let sum = message.reduce(0) { $0 + Int($1) } & 0xFFFF
                let answer =
                    state.script.writeAnswers.isEmpty
                    ? (bytes.suffix(2) == [UInt8(sum >> 8), UInt8(sum & 0xFF)] ? 0 : 2)
                    : state.script.writeAnswers.removeFirst()
                if answer == 0 { state.moBuffer = message }
                return "\(answer)\r\n\r\nOK\r\n"
            }
            guard let end = state.input.firstIndex(of: 0x0D) else { return nil }
            let line = String(decoding: state.input[..<end], as: UTF8.self).filter { $0 != "\n" }
            state.input.removeSubrange(...end)
            state.commands.append(line)
            let echo = state.echo ? line + "\r" : ""
            return echo + Self.answer(line, &state)
        }
    }

    private static func answer(_ command: String, _ state: inout State) -> String {
        let ok = "\r\nOK\r\n"
        switch command {
        case "AT", "AT&K0", "AT&K3", "AT+SBDMTA=0", "AT+SBDMTA=1":
            return ok
        case "ATE0":
            state.echo = false
            return ok
        case "AT+CIER=1,1,1":
            state.indications = true
            return ok + "+CIEV:0,\(state.script.signal)\r\n+CIEV:1,\(state.script.service ? 1 : 0)\r\n"
        case "AT+SBDD0":
            state.moBuffer = nil
            return "\r\n0\r\n" + ok
        case "AT+CSQ":
            return "\r\n+CSQ:\(state.script.service ? state.script.signal : 0)\r\n" + ok
        case "AT-MSSTM":
            let frames = String(state.script.networkTimeFrames, radix: 16)
            let time =
                state.script.service ? String(repeating: "0", count: 8 - frames.count) + frames : "no network service"
            return "\r\n-MSSTM: \(time)\r\n" + ok
        case "AT+SBDIX", "AT+SBDIXA":
            let status =
                state.script.sessions.isEmpty ? (state.script.service ? 0 : 32) : state.script.sessions.removeFirst()
            if status <= 4, let message = state.moBuffer {
                state.momsn += 1
                state.delivered.append(message)
            }
            return "\r\n+SBDIX: \(status), \(state.momsn), 0, 0, 0, 0\r\n" + ok
        default:
            if command.hasPrefix("AT+SBDWB="), let length = Int(command.dropFirst(9)) {
                guard (1...340).contains(length) else { return "\r\n3\r\n" + ok }
                state.awaitingBinary = length + 2
                return "\r\nREADY\r\n"
            }
            return "\r\nERROR\r\n"
        }
    }
}

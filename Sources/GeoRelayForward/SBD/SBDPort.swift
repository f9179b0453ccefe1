import GeoRelayCore
import Glibc

/// The Iridium modem's serial port (a 9602/9603 behind a USB or TTL adapter, a RockBLOCK), raw at
/// its speed: the one owner of its descriptor. Blocking; its user runs on a thread of its own.
package final class SBDPort {
    private let device: FileDescriptor
    package let path: String

    /// Opens `path` for reading and writing, not as a controlling terminal, raw at `baud`.
    package init(path: String, baud: Int) throws(SBDPortError) {
        guard let speed = SerialLine.speed(baud) else { throw SBDPortError("\(path): unsupported baud rate \(baud)") }
        do throws(SystemError) {
            device = try FileDescriptor.open(path, O_RDWR | O_NOCTTY)
        } catch {
            throw SBDPortError("cannot open the modem at \(path): \(String(cString: strerror(error.errno)))")
        }
        self.path = path
        SerialLine.makeRaw(device.number, speed: speed)
    }

    package func write(_ bytes: [UInt8]) throws(SBDPortError) {
        do throws(SystemError) {
            try device.writeAll(bytes, context: path)
        } catch {
            throw SBDPortError("writing to the modem at \(path): \(String(cString: strerror(error.errno)))")
        }
    }

    /// What the modem sends within `timeout` (nothing: an empty array).
    package func read(within timeout: Duration) throws(SBDPortError) -> [UInt8] {
        var descriptor = pollfd(fd: device.number, events: Int16(POLLIN), revents: 0)
        let (seconds, attoseconds) = max(timeout, .zero).components
        let ms = Int32(clamping: seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
        let ready = poll(&descriptor, 1, ms)
        guard ready > 0 else {
            if ready < 0, errno != EINTR {
                throw SBDPortError("waiting on the modem at \(path): \(String(cString: strerror(errno)))")
            }
            return []
        }
        if descriptor.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0, descriptor.revents & Int16(POLLIN) == 0 {
            throw SBDPortError("the modem at \(path) is gone")
        }
        var buffer = [UInt8](repeating: 0, count: 512)
        let read = buffer.withUnsafeMutableBytes { try? device.read(into: $0) }
        guard case .processed(let count)? = read, count > 0 else { throw SBDPortError("the modem at \(path) is gone") }
        return Array(buffer[..<count])
    }
}

package struct SBDPortError: Error, Sendable, CustomStringConvertible {
    package let message: String

    package init(_ message: String) {
        self.message = message
    }

    package var description: String { message }
}

/// The modem's dialogue (`SBDModem`) carried out over its port: each exchange's bytes written,
/// what comes back fed in, each deadline kept on the relay's clock. Blocking, on the SBD
/// uplink's own thread.
package final class SBDModemLink {
    private var modem: SBDModem
    private let port: SBDPort
    private let clock: any RelayClock

    package init(port: SBDPort, settings: SBDModem.Settings = .init(), clock: any RelayClock) {
        self.port = port
        modem = SBDModem(settings: settings)
        self.clock = clock
    }

    /// Sets the modem up. - Returns: what it reported on the way (`.ready` last when it took).
    package func start() throws(SBDPortError) -> [SBDModem.Event] {
        try run { $0.start(now: $1) }
    }

    /// Writes and sends `message` in one session. - Returns: what the modem reported, its
    /// `.session` result or a `.failed` among them.
    package func send(_ message: [UInt8], answeringRing: Bool = false) throws(SBDPortError) -> [SBDModem.Event] {
        try run { $0.send(message, answeringRing: answeringRing, now: $1) }
    }

    package func look(time: Bool) throws(SBDPortError) -> [SBDModem.Event] {
        try run { $0.look(time: time, now: $1) }
    }

    /// Indications that came while nothing was asked (signal, service, a ring), within `timeout`.
    package func listen(within timeout: Duration) throws(SBDPortError) -> [SBDModem.Event] {
        let bytes = try port.read(within: timeout)
        return try perform(modem.received(bytes, now: clock.now()))
    }

    private func run(_ begin: (inout SBDModem, RelayInstant) -> [SBDModem.Action]) throws(SBDPortError)
        -> [SBDModem.Event]
    {
        var events = try perform(begin(&modem, clock.now()))
        while !modem.isIdle, let deadline = modem.deadline {
            let now = clock.now()
            if now >= deadline {
                events += try perform(modem.timedOut(now: now))
                continue
            }
            // A second at most between looks at the clock: a simulated one may be moved meanwhile.
            let bytes = try port.read(within: min(now.duration(to: deadline), .seconds(1)))
            if !bytes.isEmpty { events += try perform(modem.received(bytes, now: clock.now())) }
        }
        return events
    }

    private func perform(_ actions: [SBDModem.Action]) throws(SBDPortError) -> [SBDModem.Event] {
        var events: [SBDModem.Event] = []
        for action in actions {
            switch action {
            case .write(let bytes): try port.write(bytes)
            case .report(let event): events.append(event)
            }
        }
        return events
    }
}

import CLinux
import GeoRelayCore
import Glibc

/// Why a collector's source could not be opened.
package struct CollectError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// Where a collector's lines come from.
package protocol LineSource: AnyObject {
    /// For messages: `/dev/ttyUSB0 at 4800 baud`, `tcp 10.0.0.5:10110`.
    var name: String { get }
    /// A receiver streaming live: when the relay falls behind, drop the oldest rather than wait.
    var isLive: Bool { get }
    /// Whether to open again (with backoff) after the source goes away, as a serial
    /// device unplugged and plugged back or a multiplexer restarting.
    var reopens: Bool { get }
    func open() throws(CollectError)
    /// The next line without its line end; nil when the source ended or went away.
    func nextLine() -> String?
    func close()
}

/// Splits what a file descriptor delivers into lines (LF or CRLF).
final class LineReader {
    private var buffer: [UInt8] = []
    private var chunk = [UInt8](repeating: 0, count: 16384)
    /// A line longer than this is cut (a relay with the default limit would refuse it anyway).
    private let maxLine = Configuration.IngestSettings().maxLineBytes

    func next(from descriptor: FileDescriptor) -> String? {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                var end = newline
                if end > 0, buffer[end - 1] == 0x0D { end -= 1 }
                let line = String(decoding: buffer[0..<min(end, maxLine)], as: UTF8.self)
                buffer.removeFirst(newline + 1)
                return line
            }
            // A read error ends the source as its end does: the collector reopens what reopens.
            let read = chunk.withUnsafeMutableBytes { try? descriptor.read(into: $0) }
            guard case .processed(let n)? = read, n > 0 else {
                guard !buffer.isEmpty else { return nil }
                let line = String(decoding: buffer.prefix(maxLine), as: UTF8.self)
                buffer.removeAll()
                return line
            }
            buffer.append(contentsOf: chunk[0..<n])
            if buffer.count > 1 << 20 { buffer.removeFirst(buffer.count - maxLine) }
        }
    }

    func reset() { buffer.removeAll() }
}

/// A source that reads lines from one file descriptor it owns (a file, a TCP
/// connection, a serial device): one place that reads and closes it.
package class DescriptorSource {
    var descriptor: FileDescriptor?
    let reader = LineReader()

    func adopt(_ descriptor: FileDescriptor) {
        self.descriptor = descriptor
        reader.reset()
    }

    package func nextLine() -> String? { descriptor.flatMap { reader.next(from: $0) } }

    package func close() {
        try? descriptor?.close()
        descriptor = nil
    }
}

/// A log file (or stdin with `-`), as fast as the relay takes it or at its own pace.
package final class FileSource: DescriptorSource, LineSource {
    private let path: String
    private let realtime: Bool
    private var lastTime: Int64?
    package var name: String { path == "-" ? "stdin" : path }
    package var isLive: Bool { false }
    package var reopens: Bool { false }

    package init(path: String, realtime: Bool) {
        self.path = path
        self.realtime = realtime
    }

    package func open() throws(CollectError) {
        do throws(SystemError) {
            // stdin through a copy of its own: closing the source must not close the process's stdin.
            adopt(
                path == "-"
                    ? FileDescriptor(adopting: try syscall("dup", "stdin") { fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0) })
                    : try FileDescriptor.open(path, O_RDONLY))
        } catch {
            throw CollectError("cannot open \(path): \(String(cString: strerror(error.errno)))")
        }
    }

    package override func nextLine() -> String? {
        guard let line = super.nextLine() else { return nil }
        if realtime, let time = NMEASentence.timeOfDay(line) {
            // At the log's own pace: wait as long as its timestamps say.
            if let last = lastTime, time > last, time - last < 60_000 {
                usleep(UInt32((time - last) * 1000))
            }
            lastTime = time
        }
        return line
    }
}

/// A TCP stream: a marine multiplexer, or any NMEA-over-TCP server.
package final class TCPSource: DescriptorSource, LineSource {
    let host: String
    let port: UInt16
    package var name: String { "tcp \(host):\(port)" }
    package var isLive: Bool { true }
    package var reopens: Bool { true }

    package init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    package func open() throws(CollectError) {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, let info = result else {
            throw CollectError("cannot resolve \(host)")
        }
        defer { freeaddrinfo(result) }
        // connect is not retried after EINTR (it goes on in the background; a second call says EALREADY).
        guard let socket = try? FileDescriptor.socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue)),
            Glibc.connect(socket.number, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0
        else {
            throw CollectError("cannot connect to \(host):\(port): \(String(cString: strerror(errno)))")
        }
        adopt(socket)
    }

    /// Writes a request (gpsd's `?WATCH`).
    /// A failure shows as the connection ending at the next read.
    func write(_ text: String) {
        guard let descriptor else { return }
        try? descriptor.sendAll(Array(text.utf8))
    }
}

/// UDP datagrams: multiplexers broadcast NMEA this way, often to port 10110.
package final class UDPSource: LineSource {
    let host: String
    let port: UInt16
    private var descriptor: FileDescriptor?
    private var lines: [String] = []
    package var name: String { "udp \(host):\(port)" }
    package var isLive: Bool { true }
    package var reopens: Bool { false }

    package init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    package func open() throws(CollectError) {
        do {
            descriptor = try IPv4Socket.bind(type: Int32(SOCK_DGRAM.rawValue), host: host, port: port).descriptor
        } catch {
            throw CollectError("cannot listen on udp \(host):\(port): \(String(cString: strerror(error.errno)))")
        }
    }

    package func nextLine() -> String? {
        guard let descriptor else { return nil }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while lines.isEmpty {
            let received = buffer.withUnsafeMutableBytes { try? descriptor.read(into: $0) }
            guard case .processed(let n)? = received else { return nil }
            lines = String(decoding: buffer[0..<n], as: UTF8.self).split(whereSeparator: \.isNewline).map(String.init)
        }
        return lines.removeFirst()
    }

    package func close() {
        try? descriptor?.close()
        descriptor = nil
    }
}

/// A serial or USB receiver, in termios raw mode; reopened when it comes back.
package final class SerialSource: DescriptorSource, LineSource {
    let path: String
    let baud: Int
    package var name: String { "\(path) at \(baud) baud" }
    package var isLive: Bool { true }
    package var reopens: Bool { true }

    package init(path: String, baud: Int) {
        self.path = path
        self.baud = baud
    }

    package static func speed(_ baud: Int) -> speed_t? { SerialLine.speed(baud) }

    package func open() throws(CollectError) {
        guard let speed = Self.speed(baud) else { throw CollectError("unsupported baud rate \(baud)") }
        let device: FileDescriptor
        do throws(SystemError) {
            device = try FileDescriptor.open(path, O_RDONLY | O_NOCTTY)
        } catch {
            throw CollectError("cannot open \(path): \(String(cString: strerror(error.errno)))")
        }
        SerialLine.makeRaw(device.number, speed: speed)
        adopt(device)
    }
}

/// A running gpsd: `?WATCH` for JSON reports, TPV and SKY lines forwarded (the relay decodes
/// them: positions, and each receiver's sky for the integrity watch).
package final class GpsdSource: LineSource {
    private let tcp: TCPSource
    /// gpsd device path → relay device id; `{path}` keeps gpsd's own path.
    private let mapping: [String: String]
    package var name: String { "gpsd \(tcp.host):\(tcp.port)" }
    package var isLive: Bool { true }
    package var reopens: Bool { true }

    package init(host: String, port: UInt16, mapping: [String: String]) {
        tcp = TCPSource(host: host, port: port)
        self.mapping = mapping
    }

    package func open() throws(CollectError) {
        try tcp.open()
        tcp.write(#"?WATCH={"enable":true,"json":true}"# + "\n")
    }

    package func nextLine() -> String? {
        while let line = tcp.nextLine() {
            guard line.hasPrefix("{\"class\":\"TPV\"") || line.hasPrefix("{\"class\":\"SKY\"") else { continue }
            guard !mapping.isEmpty, case .object(var report)? = try? JSONParser.parse(line),
                case .string(let path)? = report["device"], let id = mapping[path]
            else { return line }
            report.members = report.members.map { $0.key == "device" ? ($0.key, .string(id)) : $0 }
            return JSONValue.object(report).jsonText
        }
        return nil
    }

    package func close() { tcp.close() }
}

extension NMEASentence {
    /// The time of day of an RMC or GGA line, for pacing a replay.
    static func timeOfDay(_ line: String) -> Int64? {
        guard line.contains("RMC,") || line.contains("GGA,"), let sentence = try? NMEASentence.parse(line) else {
            return nil
        }
        return sentence.timeOfDayMs(0)
    }
}

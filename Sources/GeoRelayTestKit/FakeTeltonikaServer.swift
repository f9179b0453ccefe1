import CLinux
import Foundation
import GeoRelayCore
import Glibc
import Synchronization

/// A Traccar Teltonika port (TCP) that frames and decodes bytes exactly as Traccar's
/// `TeltonikaFrameDecoder` and `TeltonikaProtocolDecoder` do, and records what it stored.
///
/// Framing (`TeltonikaFrameDecoder`, built with a 32 KiB limit):
/// - a leading `0xFF` is a one-byte frame (a device's ping), ignored;
/// - nothing is decided until 12 bytes are buffered;
/// - a non-zero 2-byte length starts an identification of that many bytes after it;
/// - a zero length starts a data frame of the signed 4-byte length at offset 4, plus 12;
/// - more than 32 768 bytes buffered without a complete frame closes the connection.
///
/// Decoding (`TeltonikaProtocolDecoder`, TCP, default configuration):
/// - identification: `0x01` for a known id (every id not in ``setUnknownDevices(_:)``),
///   `0x00` for an unknown one; a known id opens a session on the connection;
/// - a data frame on a connection with no session is dropped without an answer, and the
///   connection stays open;
/// - codec 8, 8 Extended and 16 records decode as Traccar decodes them for a device with
///   no model set: the fixed fields, `priority`, `sat`, `event`, the IO ids Traccar maps for
///   every model under its names, any other id as `io<id>`; an unknown codec id is read as
///   codec 8, as Traccar does. Then the 4-byte count from the frame's header is answered;
/// - the CRC, the second count and the IO total are not checked, as Traccar does not;
/// - reading past the end of a frame closes the connection without an answer (Traccar's
///   decoder throws and `MainEventHandler.exceptionCaught` closes the channel), and keeps
///   none of the frame's records.
///
/// Not modelled: codecs 7 (GH3000), 12 and 13 (the fake closes the connection), the
/// 16-byte section that `protocol.extended` turns on, model-specific IO ids, and cell
/// towers. It is kept independent of the relay's own Teltonika codec on purpose, so
/// tests are not circular.
package final class FakeTeltonikaServer: Sendable {
    /// A position as Traccar would store it.
    package struct Stored: Sendable, Equatable {
        package var uniqueId: String
        package var fixTimeMs: Int64
        package var valid: Bool
        package var lat: Double
        package var lon: Double
        package var speedKnots: Double
        package var course: Double
        package var altitude: Double
        package var satellites: Int
        package var attributes: [String: AttributeValue]
        /// Which accepted connection carried it (1 for the first).
        package var connection: Int
        /// When it was stored (wall clock), for Traccar's buffering (`TraccarModel`).
        package var arrivalMs: Int64 = 0
    }

    /// One identification frame and how it was answered.
    package struct Identification: Sendable, Equatable {
        package var uniqueId: String
        package var known: Bool
        package var connection: Int
        /// A data frame's bytes had arrived behind it (the client did not wait for its answer).
        package var withFrame = false
    }

    /// Counters, for tests that assert on what happened on the wire.
    package struct Statistics: Sendable, Equatable {
        package var connections = 0
        /// Bytes received; counted after the bytes of each read have been decoded, so a
        /// test that sees a count knows every frame in those bytes has been handled (not so with
        /// `readsAhead`: what it reads ahead is counted before the frames in it are answered).
        package var bytesReceived = 0
        package var identifications: [Identification] = []
        /// Data frames answered with a count.
        package var framesAnswered = 0
        /// Connections the server closed: a frame it could not decode, one too long, or a
        /// behaviour that closes.
        package var closedByServer = 0
        /// The most data frames that were on one connection at once, the one being answered and
        /// those already received whole behind it: above 1 only when a client pipelines.
        package var deepestPipeline = 0
    }

    /// How the server treats a decoded data frame, for fault tests. Identification is always answered.
    package enum Behaviour: Sendable, Equatable {
        case normal
        /// Keeps nothing and closes without answering: a decoder that threw.
        case closeWithoutAnswer
        /// Keeps the records and closes before answering: the answer lost on the way back,
        /// so the client will send them again.
        case storeThenClose
        /// Reads frames and never answers until the behaviour changes, then closes:
        /// a server wedged behind a live TCP connection.
        case hang
    }

    private struct State {
        var positions: [Stored] = []
        var statistics = Statistics()
        var unknownDevices: Set<String> = []
        var behaviour = Behaviour.normal
        var undecodable: Set<Int64> = []
    }

    private let state = Mutex(State())
    package let changed = WakeSignal()
    private let listener: TestTCPListener
    /// How long a data frame's answer waits for another frame behind it; nil: none.
    private let readsAhead: Duration?

    /// Traccar's `BaseProtocol.MAX_FRAME_LENGTH_LARGE`, which `TeltonikaFrameDecoder` is built with.
    package static let maxFrameLength = 32 * 1024

    package var port: Int { listener.port }
    package var positions: [Stored] { state.withLock { $0.positions } }

    /// What Traccar made of the positions in the order they came (`TraccarModel`).
    package func traccar(bufferingMs: Int64 = 0) -> TraccarModel {
        TraccarModel(positions.map(TraccarModel.Arrival.init), bufferingMs: bufferingMs)
    }
    package var statistics: Statistics { state.withLock { $0.statistics } }

    /// Starts on an ephemeral loopback port.
    /// - Parameter readsAhead: a server that reads before it answers: each data frame's answer
    ///   waits up to this long for another frame behind it, so `deepestPipeline` shows a client
    ///   that pipelines whatever the timing (one that does not gets every answer this late).
    ///   - host: the address to listen on (`0.0.0.0` inside a test's network namespace).
    package init(readsAhead: Duration? = nil, host: String = "127.0.0.1") throws {
        self.readsAhead = readsAhead
        let server = WeakReference<FakeTeltonikaServer>()
        listener = try TestTCPListener(name: "teltonika-test", backlog: 64, host: host) { fd, number in
            server.value?.serve(fd, number: number)
        }
        server.value = self
    }

    /// Listens (again) on `port` (0: any free port).
    package func start(port: Int) throws { try listener.start(port: port) }

    /// Closes the listener and every open connection: the server is gone.
    package func stop() { listener.stop() }

    package func setUnknownDevices(_ devices: Set<String>) { state.withLock { $0.unknownDevices = devices } }
    package func setBehaviour(_ behaviour: Behaviour) { state.withLock { $0.behaviour = behaviour } }

    /// Records with these fix times make Traccar's decoder throw, whatever the behaviour: a data
    /// frame holding any of them closes the connection without an answer and keeps none of its
    /// records. The relay's codec builds only frames Traccar decodes, so this stands in for a
    /// value a real server cannot parse.
    package func setUndecodable(fixTimes: Set<Int64>) { state.withLock { $0.undecodable = fixTimes } }

    /// Forgets everything stored, as a server restored from an old backup.
    package func clear() { state.withLock { $0.positions.removeAll() } }

    /// Waits until `condition` holds over the counters, or `timeout` passes. Returns whether it held.
    @discardableResult
    package func waitForStatistics(timeout: Duration = .seconds(30), _ condition: @Sendable (Statistics) -> Bool) async
        -> Bool
    {
        await awaitCondition(
            timeout: timeout, changed: changed, snapshot: { [state.withLock { $0.statistics }] },
            { condition($0[0]) })
    }

    // MARK: Connections

    private func serve(_ fd: Int32, number: Int) {
        state.withLock { $0.statistics.connections += 1 }
        changed.signal()
        defer { shutdown(fd, Int32(SHUT_RDWR)) }
        var connection = Connection(number: number)
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 {
                if n < 0, errno == EINTR { continue }
                return
            }
            connection.buffer.append(contentsOf: chunk[0..<n])
            let open = receive(&connection, fd: fd)
            state.withLock {
                $0.statistics.bytesReceived += n
                if !open { $0.statistics.closedByServer += 1 }
            }
            changed.signal()
            if !open { return }
        }
    }

    private struct Connection {
        let number: Int
        var buffer: [UInt8] = []
        /// Known ids identified on this connection, in order (Traccar's endpoint sessions).
        var sessions: [String] = []
        /// Bytes were read behind the frame being handled.
        var readBehind = false
    }

    /// Netty's `ByteToMessageDecoder` loop over `TeltonikaFrameDecoder`: frames are cut
    /// and decoded while the buffer yields them. Returns false when the connection must close.
    private func receive(_ connection: inout Connection, fd: Int32) -> Bool {
        var start = 0
        defer { connection.buffer.removeFirst(start) }
        while start < connection.buffer.count {
            let frame: Range<Int>
            switch Self.nextFrame(connection.buffer, from: start) {
            case .frame(let range): frame = range
            case .needMore:
                // BaseFrameDecoder: TooLongFrameException, and the channel closes.
                return connection.buffer.count - start <= Self.maxFrameLength
            case .invalid:
                return false
            }
            start = frame.upperBound
            if Self.isData(connection.buffer, at: frame.lowerBound) {
                readAhead(&connection, from: start, fd: fd)
                let behind = Self.dataFramesBuffered(connection.buffer, from: start)
                state.withLock { $0.statistics.deepestPipeline = max($0.statistics.deepestPipeline, 1 + behind) }
            }
            connection.readBehind = start < connection.buffer.count
            guard handle(Array(connection.buffer[frame]), connection: &connection, fd: fd) else { return false }
        }
        return true
    }

    /// With `readsAhead`, waits that long for more bytes unless a whole frame is already buffered
    /// behind the one about to be answered.
    private func readAhead(_ connection: inout Connection, from start: Int, fd: Int32) {
        guard let readsAhead, Self.dataFramesBuffered(connection.buffer, from: start) == 0 else { return }
        let deadline = ContinuousClock.now + readsAhead
        var chunk = [UInt8](repeating: 0, count: 65536)
        while Self.dataFramesBuffered(connection.buffer, from: start) == 0 {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let (seconds, attoseconds) = left.components
            let ms = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
            guard poll(&descriptor, 1, ms) > 0 else { return }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return }
            connection.buffer.append(contentsOf: chunk[0..<n])
            state.withLock { $0.statistics.bytesReceived += n }
        }
    }

    /// Whether the frame at `start` is a data frame (a zero length where an id has its own).
    private static func isData(_ buffer: [UInt8], at start: Int) -> Bool {
        buffer.count - start >= 2 && buffer[start] == 0 && buffer[start + 1] == 0
    }

    /// Whole data frames in `buffer` from `start`.
    private static func dataFramesBuffered(_ buffer: [UInt8], from start: Int) -> Int {
        var count = 0
        var at = start
        while case .frame(let range) = nextFrame(buffer, from: at) {
            if isData(buffer, at: at) { count += 1 }
            at = range.upperBound
        }
        return count
    }

    private enum FrameCut {
        case frame(Range<Int>)
        case needMore
        /// Netty throws: a negative slice length, or a frame that consumes nothing.
        case invalid
    }

    /// `TeltonikaFrameDecoder.decode`, in Java's `int` arithmetic.
    private static func nextFrame(_ buffer: [UInt8], from start: Int) -> FrameCut {
        let readable = buffer.count - start
        if readable > 0, buffer[start] == 0xFF { return .frame(start..<(start + 1)) }
        if readable < 12 { return .needMore }
        let length = Int(buffer[start]) << 8 | Int(buffer[start + 1])
        if length > 0 {
            return readable >= length + 2 ? .frame(start..<(start + length + 2)) : .needMore
        }
        var raw: UInt32 = 0
        for i in 4..<8 { raw = raw << 8 | UInt32(buffer[start + i]) }
        let total = Int32(bitPattern: raw) &+ 12
        guard Int32(clamping: readable) >= total else { return .needMore }
        guard total > 0 else { return .invalid }
        return .frame(start..<(start + Int(total)))
    }

    /// `TeltonikaProtocolDecoder.decodeTcp` on one frame. Returns false when the connection must close.
    private func handle(_ frame: [UInt8], connection: inout Connection, fd: Int32) -> Bool {
        if frame.count == 1, frame[0] == 0xFF { return true }
        var reader = WireReader(frame)
        do {
            if frame.count >= 2, Int(frame[0]) << 8 | Int(frame[1]) > 0 {
                let id = try reader.ascii(Int(try reader.u16()))
                let known = !state.withLock { $0.unknownDevices.contains(id) }
                if known, !connection.sessions.contains(id) { connection.sessions.append(id) }
                state.withLock {
                    $0.statistics.identifications.append(
                        Identification(
                            uniqueId: id, known: known, connection: connection.number,
                            withFrame: connection.readBehind))
                }
                return send(fd, [known ? 1 : 0])
            }
            try reader.skip(4)
            _ = try reader.u32() // data length
            let codec = try reader.u8()
            let count = try reader.u8()
            // ConnectionManager.getDeviceSession with no id: any session of the connection.
            guard let uniqueId = connection.sessions.first else { return true }
            var decoded: [Stored] = []
            for _ in 0..<count {
                var position = try Self.decodeLocation(&reader, codec: codec)
                position.uniqueId = uniqueId
                position.connection = connection.number
                decoded.append(position)
            }
            return deliver(decoded, count: count, fd: fd)
        } catch {
            return false
        }
    }

    /// Applies the behaviour to a decoded data frame. Returns false when the connection must close.
    private func deliver(_ decoded: [Stored], count: UInt8, fd: Int32) -> Bool {
        let undecodable = state.withLock { $0.undecodable }
        if decoded.contains(where: { undecodable.contains($0.fixTimeMs) }) { return false }
        var behaviour = state.withLock { $0.behaviour }
        if behaviour == .hang {
            // Each connection has its own thread, so holding this one wedges only this connection.
            // Capped at a minute so a test that ends while hanging leaves no thread behind for long.
            for _ in 0..<3000 where behaviour == .hang {
                usleep(20_000)
                behaviour = state.withLock { $0.behaviour }
            }
            return false
        }
        if behaviour == .normal || behaviour == .storeThenClose {
            let arrivalMs = WallClock.nowMs()
            state.withLock {
                $0.positions += decoded.map {
                    var p = $0
                    p.arrivalMs = arrivalMs
                    return p
                }
            }
            changed.signal()
        }
        guard behaviour == .normal else { return false }
        state.withLock { $0.statistics.framesAnswered += 1 }
        return send(fd, [0, 0, 0, count])
    }

    private func send(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
            }
            if n < 0, errno == EINTR { continue }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }
}

// MARK: - Traccar's record decoding

extension FakeTeltonikaServer {
    private static let codec8: UInt8 = 0x08
    private static let codec8Extended: UInt8 = 0x8E
    private static let codec16: UInt8 = 0x10

    struct Unsupported: Error {}

    /// `decodeLocation` for every codec but GH3000, for a device with no model.
    private static func decodeLocation(_ r: inout WireReader, codec: UInt8) throws -> Stored {
        if codec == 0x07 || codec == 0x0C || codec == 0x0D { throw Unsupported() }
        var attributes: [String: AttributeValue] = [:]
        let extended = codec == codec8Extended
        func ext(_ wide: Bool) throws -> Int { wide ? Int(try r.u16()) : Int(try r.u8()) }

        let time = Int64(bitPattern: try r.u64())
        attributes["priority"] = .number(Double(try r.u8()))
        let lon = Double(Int32(bitPattern: try r.u32())) / 10000000.0
        let lat = Double(Int32(bitPattern: try r.u32())) / 10000000.0
        let altitude = Double(Int16(bitPattern: try r.u16()))
        let course = Double(try r.u16())
        let satellites = Int(try r.u8())
        attributes["sat"] = .number(Double(satellites))
        let speedKnots = Double(try r.u16()) * 0.539957
        attributes["event"] = .number(Double(try ext(extended || codec == codec16)))
        if codec == codec16 { _ = try r.u8() } // generation type
        _ = try ext(extended) // total IO data records

        for width in [1, 2, 4] {
            let count = try ext(extended)
            for _ in 0..<count {
                try parameter(id: try ext(extended || codec == codec16), width: width, &r, &attributes)
            }
        }
        if codec == codec8 || extended || codec == codec16 {
            let count = try ext(extended)
            for _ in 0..<count {
                try parameter(id: try ext(extended || codec == codec16), width: 8, &r, &attributes)
            }
        }
        if extended {
            let count = Int(try r.u16())
            for _ in 0..<count {
                let id = Int(try r.u16())
                let length = Int(try r.u16())
                try variable(id: id, try r.slice(length), &attributes)
            }
        }
        return Stored(
            uniqueId: "", fixTimeMs: time, valid: satellites != 0, lat: lat, lon: lon, speedKnots: speedKnots,
            course: course, altitude: altitude, satellites: satellites, attributes: attributes, connection: 0)
    }

    /// `decodeParameter`: a handler registered for every model reads its own width, then the
    /// reader moves to where the section's width ends the element; any other id is `io<id>`.
    private static func parameter(id: Int, width: Int, _ r: inout WireReader, _ a: inout [String: AttributeValue])
        throws
    {
        let start = r.index
        func number(_ key: String, _ value: Double) { a[key] = .number(value) }
        func flag(_ key: String) throws { a[key] = .bool(try r.u8() > 0) }
        func alarm(_ name: String?) {
            guard let name else { return }
            a["alarm"] = .string(a["alarm"].map { $0.text + "," + name } ?? name)
        }
        switch id {
        case 1, 2, 3, 4: try flag("in\(id)")
        case 16: number("odometer", Double(try r.u32()))
        case 17: number("axisX", Double(Int16(bitPattern: try r.u16())))
        case 18: number("axisY", Double(Int16(bitPattern: try r.u16())))
        case 19: number("axisZ", Double(Int16(bitPattern: try r.u16())))
        case 21: number("rssi", Double(try r.u8()))
        case 25, 26, 27, 28: number("bleTemp\(id - 24)", Double(Int16(bitPattern: try r.u16())) / 100.0)
        case 66: number("power", Double(try r.u16()) / 1000.0)
        case 67: number("battery", Double(try r.u16()) / 1000.0)
        case 78:
            let driver = try r.u64LittleEndian()
            if driver != 0 { a["driverUniqueId"] = .string(hex(driver, digits: 16, uppercase: true)) }
        case 179: try flag("out1")
        case 180: try flag("out2")
        case 181: number("pdop", Double(try r.u16()) / 10.0)
        case 182: number("hdop", Double(try r.u16()) / 10.0)
        case 199: number("tripOdometer", Double(try r.u32()))
        case 236: alarm(try r.u8() > 0 ? "general" : nil)
        case 239: try flag("ignition")
        case 240: try flag("motion")
        case 241: number("operator", Double(try r.u32()))
        case 253:
            switch try r.u8() {
            case 1: alarm("hardAcceleration")
            case 2: alarm("hardBraking")
            case 3: alarm("hardCornering")
            default: break
            }
        default:
            // readValue: unsigned for 1, 2 and 4 bytes, a signed long for 8.
            let value: Double =
                switch width {
                case 1: Double(try r.u8())
                case 2: Double(try r.u16())
                case 4: Double(try r.u32())
                default: Double(Int64(bitPattern: try r.u64()))
                }
            number("io\(id)", value)
            return
        }
        try r.seek(start + width)
    }

    /// The variable-length section of codec 8 Extended.
    private static func variable(id: Int, _ data: WireReader, _ a: inout [String: AttributeValue]) throws {
        var data = data
        switch id {
        case 256, 325:
            a["vin"] = .string(try data.ascii(data.remaining))
        case 281:
            a["dtcs"] = .string(try data.ascii(data.remaining).replacingOccurrences(of: ",", with: " "))
        case 385:
            _ = try data.u8() // data part
            var index = 1
            while data.remaining > 0 {
                let flags = try data.u8()
                let prefix = "beacon\(index)"
                if flags >> 4 > 0 {
                    a[prefix + "Uuid"] = .string(try data.hexDump(16))
                    a[prefix + "Major"] = .number(Double(try data.u16()))
                    a[prefix + "Minor"] = .number(Double(try data.u16()))
                } else {
                    a[prefix + "Namespace"] = .string(try data.hexDump(10))
                    a[prefix + "Instance"] = .string(try data.hexDump(6))
                }
                a[prefix + "Rssi"] = .number(Double(Int8(bitPattern: try data.u8())))
                if flags & 0x02 != 0 { a[prefix + "Battery"] = .number(Double(try data.u16()) / 100.0) }
                if flags & 0x04 != 0 { a[prefix + "Temp"] = .number(Double(try data.u16())) }
                index += 1
            }
        case 548, 10828, 10829, 10831, 11317:
            _ = try data.u8() // header
            var i = 1
            while data.remaining > 0 {
                var beacon = try data.slice(Int(try data.u8()))
                let prefix = "tag\(i)"
                while beacon.remaining > 0 {
                    let parameter = try beacon.u8()
                    let length = Int(try beacon.u8())
                    switch parameter {
                    case 0: a[prefix + "Rssi"] = .number(Double(Int8(bitPattern: try beacon.u8())))
                    case 1: a[prefix + "Id"] = .string(try beacon.hexDump(length))
                    case 2:
                        var flagged = try beacon.slice(length)
                        let flag = try flagged.u8()
                        if flag & 0x40 != 0 { a[prefix + "LowBattery"] = .bool(true) }
                        if flag & 0x80 != 0 {
                            a[prefix + "Voltage"] = .number(Double(Int(try flagged.u8()) * 10 + 2000))
                        }
                    case 5: a[prefix + "Name"] = .string(String(decoding: try beacon.bytes(length), as: UTF8.self))
                    case 6: a[prefix + "Temp"] = .number(Double(Int16(bitPattern: try beacon.u16())))
                    case 7: a[prefix + "Humidity"] = .number(Double(try beacon.u8()))
                    case 8: a[prefix + "Magnet"] = .bool(try beacon.u8() > 0)
                    case 9: a[prefix + "Motion"] = .bool(try beacon.u8() > 0)
                    case 10: a[prefix + "MotionCount"] = .number(Double(try beacon.u16()))
                    case 11: a[prefix + "Pitch"] = .number(Double(Int8(bitPattern: try beacon.u8())))
                    case 12: a[prefix + "AngleRoll"] = .number(Double(Int16(bitPattern: try beacon.u16())))
                    case 13: a[prefix + "LowBattery"] = .number(Double(try beacon.u8()))
                    case 14: a[prefix + "Battery"] = .number(Double(try beacon.u16()))
                    case 15: a[prefix + "Mac"] = .string(try beacon.hexDump(6))
                    default: try beacon.skip(length)
                    }
                }
                i += 1
            }
        default:
            a["io\(id)"] = .string(try data.hexDump(data.remaining))
        }
    }

    /// Java's `String.format("%016X", long)` and Netty's lowercase `ByteBufUtil.hexDump`.
    static func hex(_ value: UInt64, digits: Int, uppercase: Bool) -> String {
        let text = String(value, radix: 16, uppercase: uppercase)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}

/// A bounds-checked big-endian reader over one frame: reading past the end throws,
/// as Netty's `ByteBuf` does.
struct WireReader {
    struct Overrun: Error {}

    private let storage: [UInt8]
    private(set) var index: Int
    private let end: Int

    init(_ bytes: [UInt8]) {
        self.init(bytes, start: 0, end: bytes.count)
    }

    private init(_ bytes: [UInt8], start: Int, end: Int) {
        storage = bytes
        index = start
        self.end = end
    }

    var remaining: Int { end - index }

    private mutating func take(_ count: Int) throws -> Range<Int> {
        guard count >= 0, count <= remaining else { throw Overrun() }
        defer { index += count }
        return index..<(index + count)
    }

    private mutating func bigEndian(_ count: Int) throws -> UInt64 {
        try take(count).reduce(0) { $0 << 8 | UInt64(storage[$1]) }
    }

    mutating func u8() throws -> UInt8 { UInt8(try bigEndian(1)) }
    mutating func u16() throws -> UInt16 { UInt16(try bigEndian(2)) }
    mutating func u32() throws -> UInt32 { UInt32(try bigEndian(4)) }
    mutating func u64() throws -> UInt64 { try bigEndian(8) }
    mutating func u64LittleEndian() throws -> UInt64 {
        try take(8).reversed().reduce(0) { $0 << 8 | UInt64(storage[$1]) }
    }
    mutating func skip(_ count: Int) throws { _ = try take(count) }
    mutating func bytes(_ count: Int) throws -> ArraySlice<UInt8> { storage[try take(count)] }

    /// Netty's `readerIndex(int)`: past the end throws.
    mutating func seek(_ position: Int) throws {
        guard position <= end else { throw Overrun() }
        index = position
    }

    /// Netty's `readSlice`: a reader over the next `count` bytes, which this one skips.
    mutating func slice(_ count: Int) throws -> WireReader {
        let range = try take(count)
        return WireReader(storage, start: range.lowerBound, end: range.upperBound)
    }

    /// US-ASCII as Java decodes it: a byte above 0x7F becomes U+FFFD.
    mutating func ascii(_ count: Int) throws -> String {
        String(String.UnicodeScalarView(try bytes(count).map { $0 < 0x80 ? Unicode.Scalar($0) : "\u{FFFD}" }))
    }

    mutating func hexDump(_ count: Int) throws -> String {
        try bytes(count).map { FakeTeltonikaServer.hex(UInt64($0), digits: 2, uppercase: false) }.joined()
    }
}

extension FakeTeltonikaServer.Stored: TraccarStoredPosition {}

extension FakeTeltonikaServer: ArrivalLog {
    package var arrivals: [Stored] { positions }
}

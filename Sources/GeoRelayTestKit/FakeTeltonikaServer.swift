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
    /// nil on the simulated network, where `accept(connection:)` serves each connection.
    private let listener: TestTCPListener?
    /// How long a data frame's answer waits for another frame behind it; nil: none.
    private let readsAhead: Duration?
    /// When a position is stored (`Stored.arrivalMs`): the wall clock, or a simulated one.
    private let now: @Sendable () -> Int64

    /// Traccar's `BaseProtocol.MAX_FRAME_LENGTH_LARGE`, which `TeltonikaFrameDecoder` is built with.
    package static let maxFrameLength = 32 * 1024

    package var port: Int {
        guard let listener else { preconditionFailure("a fake Teltonika port on the simulated network has no socket") }
        return listener.port
    }
    package var positions: [Stored] { state.withLock { $0.positions } }
    /// The positions stored after the first `start`: a long wait looks at what is new, not at all.
    package func positions(from start: Int) -> ArraySlice<Stored> {
        state.withLock { $0.positions[min(start, $0.positions.count)...] }
    }

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
        now = { WallClock.nowMs() }
        let server = WeakReference<FakeTeltonikaServer>()
        listener = try TestTCPListener(name: "teltonika-test", backlog: 64, host: host) { fd, number in
            server.value?.serve(fd, number: number)
        }
        server.value = self
    }

    /// The same port on the simulated network (`SimulatedService`): no socket, positions stored at
    /// `now`'s time, and no server that waits on its own (`readsAhead`, a `hang` that ends).
    package init(simulatedNow now: @escaping @Sendable () -> Int64) {
        readsAhead = nil
        self.now = now
        listener = nil
    }

    /// Listens (again) on `port` (0: any free port).
    package func start(port: Int) throws { try listener?.start(port: port) }

    /// Closes the listener and every open connection: the server is gone.
    package func stop() { listener?.stop() }

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
        accepted()
        defer { shutdown(fd, Int32(SHUT_RDWR)) }
        var connection = Connection(number: number)
        let wire = Wire(send: { Self.send(fd, $0) }, more: { Self.read(fd, until: $0) }, blocks: true)
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 {
                if n < 0, errno == EINTR { continue }
                return
            }
            guard received(Array(chunk[0..<n]), on: &connection, wire: wire) else { return }
        }
    }

    private func accepted() {
        state.withLock { $0.statistics.connections += 1 }
        changed.signal()
    }

    /// Bytes that reached a connection, decoded and answered through `wire`. Returns false when
    /// the server closes the connection.
    private func received(_ bytes: [UInt8], on connection: inout Connection, wire: Wire) -> Bool {
        connection.buffer.append(contentsOf: bytes)
        let open = receive(&connection, wire: wire)
        state.withLock {
            $0.statistics.bytesReceived += bytes.count
            if !open { $0.statistics.closedByServer += 1 }
        }
        changed.signal()
        return open
    }

    /// Where a connection's answers go, and whether the server may wait on it: a socket, or the
    /// simulated network (whose server answers at once, in simulated time, and never blocks).
    private struct Wire {
        /// Writes an answer; false when the connection is gone.
        var send: ([UInt8]) -> Bool
        /// Bytes that arrive before the deadline (nil: none); nil on the simulated network.
        var more: ((ContinuousClock.Instant) -> [UInt8]?)?
        /// A `hang` holds the server's thread until the behaviour changes.
        var blocks: Bool
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
    private func receive(_ connection: inout Connection, wire: Wire) -> Bool {
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
                readAhead(&connection, from: start, wire: wire)
                let behind = Self.dataFramesBuffered(connection.buffer, from: start)
                state.withLock { $0.statistics.deepestPipeline = max($0.statistics.deepestPipeline, 1 + behind) }
            }
            connection.readBehind = start < connection.buffer.count
            guard handle(Array(connection.buffer[frame]), connection: &connection, wire: wire) else { return false }
        }
        return true
    }

    /// With `readsAhead`, waits that long for more bytes unless a whole frame is already buffered
    /// behind the one about to be answered.
    private func readAhead(_ connection: inout Connection, from start: Int, wire: Wire) {
        guard let readsAhead, let more = wire.more, Self.dataFramesBuffered(connection.buffer, from: start) == 0
        else { return }
        let deadline = ContinuousClock.now + readsAhead
        while Self.dataFramesBuffered(connection.buffer, from: start) == 0, let bytes = more(deadline) {
            connection.buffer.append(contentsOf: bytes)
            state.withLock { $0.statistics.bytesReceived += bytes.count }
        }
    }

    /// What arrives on `fd` before `deadline`; nil when nothing did, or the peer closed.
    private static func read(_ fd: Int32, until deadline: ContinuousClock.Instant) -> [UInt8]? {
        let left = ContinuousClock.now.duration(to: deadline)
        guard left > .zero else { return nil }
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let (seconds, attoseconds) = left.components
        let ms = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
        guard poll(&descriptor, 1, ms) > 0 else { return nil }
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n > 0 ? Array(chunk[0..<n]) : nil
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
    private func handle(_ frame: [UInt8], connection: inout Connection, wire: Wire) -> Bool {
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
                return wire.send([known ? 1 : 0])
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
            return deliver(decoded, count: count, wire: wire)
        } catch {
            return false
        }
    }

    /// Applies the behaviour to a decoded data frame. Returns false when the connection must close.
    private func deliver(_ decoded: [Stored], count: UInt8, wire: Wire) -> Bool {
        let undecodable = state.withLock { $0.undecodable }
        if decoded.contains(where: { undecodable.contains($0.fixTimeMs) }) { return false }
        var behaviour = state.withLock { $0.behaviour }
        if behaviour == .hang {
            // On the simulated network: no answer, and the connection stays open.
            guard wire.blocks else { return true }
            // Each connection has its own thread, so holding this one wedges only this connection.
            // Capped at a minute so a test that ends while hanging leaves no thread behind for long.
            for _ in 0..<3000 where behaviour == .hang {
                usleep(20_000)
                behaviour = state.withLock { $0.behaviour }
            }
            return false
        }
        if behaviour == .normal || behaviour == .storeThenClose {
            let arrivalMs = now()
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
        return wire.send([0, 0, 0, count])
    }

    private static func send(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
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

// MARK: - On the simulated network

extension FakeTeltonikaServer: SimulatedService {
    package func accept(connection number: Int) -> any SimulatedSession {
        accepted()
        return SimulatedTeltonikaSession(server: self, number: number)
    }

    /// One connection's bytes through the same framing and decoding as a socket's; its answers
    /// leave at once (Traccar's decoder takes microseconds), a close with what it holds unread.
    private final class SimulatedTeltonikaSession: SimulatedSession {
        let server: FakeTeltonikaServer
        var connection: Connection
        var closed = false

        init(server: FakeTeltonikaServer, number: Int) {
            self.server = server
            connection = Connection(number: number)
        }

        var holdsUnread: Bool { !connection.buffer.isEmpty }

        func received(_ bytes: [UInt8], at now: RelayInstant) -> [SimulatedReply] {
            guard !closed else { return [] }
            var replies: [SimulatedReply] = []
            let wire = Wire(
                send: {
                    replies.append(.send($0))
                    return true
                }, more: nil, blocks: false)
            if !server.received(bytes, on: &connection, wire: wire) {
                closed = true
                replies.append(.close(lingering: false))
            }
            return replies
        }
    }
}

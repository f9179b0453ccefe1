import CLinux
import Foundation
import GeoRelayCore
import GeoRelayForward
import Glibc
import Synchronization

/// A TCP proxy on loopback between the relay and a fake server that breaks
/// the link on command, the ways real uplinks break, and counts what the relay
/// sends while it is broken.
///
/// A mode applies to connections accepted while it holds. Switching to a down
/// mode also breaks the connections already open (a link that dies takes its
/// TCP connections with it): a black hole stops forwarding them, every other
/// mode resets them.
package final class FaultProxy: Sendable {
    package enum Mode: String, Sendable, Equatable, CaseIterable {
        /// Forward both ways (with the bandwidth cap and latency, if any).
        case pass
        /// Nothing listens: connects fail at once (`ECONNREFUSED`).
        case refuse
        /// Accept, read everything, never answer: the relay's timeouts must fire.
        case blackHole
        /// Read the request, close without a byte of answer: a middlebox, or Traccar refusing a payload.
        case closeAfterRequest
        /// Read part of the request, then reset the connection.
        case resetMidRequest
        /// Forward the request (the server takes it), pass back the answer's first 5 bytes, then reset.
        case resetMidResponse
        /// A terminal's TCP accelerator (PEP) answering the handshake on board and closing at once,
        /// with nothing said.
        case closeAtOnce
        /// A PEP that answers the handshake on board and holds the connection silent, new and open
        /// ones alike, reading what the relay sends; when the link returns it carries them through.
        case hold
        /// The handshake gets no answer at all (SYNs dropped), and open connections go silent.
        case drop

        package var isDown: Bool { self != .pass }
        /// Modes in which the port does not accept: nothing listens, or a listener whose queue is full.
        var replacesListener: Bool { self == .refuse || self == .drop }
        /// Every way down.
        package static let allDown: [Mode] = allCases.filter(\.isDown)
    }

    /// What crossed the proxy.
    package struct Counters: Sendable {
        package var connections = 0
        /// Relay → server bytes the proxy received (whether or not it forwarded them).
        package var bytesUp = 0
        package var bytesDown = 0
        /// Relay → server bytes received while the mode was not `pass`.
        package var bytesUpWhileDown = 0
        /// Requests seen while down, by method.
        package var requestsWhileDown: [String: Int] = [:]
        /// Of those, payloads: a POST, or a GET with the position in its query (pipelined OsmAnd).
        package var payloadsWhileDown = 0
        /// Of those, probes and canaries: a GET that names nothing (no query), or a Teltonika
        /// identification as `TeltonikaProbe.uniqueID` (16 bytes each).
        package var probesWhileDown = 0
    }

    private struct State {
        var mode = Mode.pass
        /// Bumped when the link goes down: connections from an older epoch are broken.
        var epoch = 0
        var counters = Counters()
        var listenFD: Int32 = -1
    }

    private let state = Mutex(State())
    /// When the link is next free in each direction: one clock for every connection through the
    /// proxy, so N connections share the bandwidth as they do on a real terminal (a clock per
    /// connection gave 4 pipelined connections, or 40 Teltonika ones, 4 or 40 times the link).
    private let departures = Mutex((up: UInt64(0), down: UInt64(0)))
    private let targetPort: Int
    private let bytesPerSecond: Int?
    private let latencyMs: Int
    private let portValue: Int
    private let stopped = Atomic<Bool>(false)

    package var port: Int { portValue }
    package var mode: Mode { state.withLock { $0.mode } }
    package var counters: Counters { state.withLock { $0.counters } }

    /// - Parameters:
    ///   - bytesPerSecond: a cap in each direction (a satellite terminal's few hundred kbit/s),
    ///     shared by all connections through the proxy, or nil.
    ///   - latencyMs: added before each chunk is forwarded, each way.
    package init(targetPort: Int, bytesPerSecond: Int? = nil, latencyMs: Int = 0) throws {
        self.targetPort = targetPort
        self.bytesPerSecond = bytesPerSecond
        self.latencyMs = latencyMs
        let bound = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 64)
        let (fd, port) = (bound.descriptor.release(), bound.port)
        portValue = port
        state.withLock { $0.listenFD = fd }
        Thread { [self] in acceptLoop() }.start()
    }

    package func setMode(_ mode: Mode) {
        state.withLock { state in
            guard state.mode != mode else { return }
            // A held connection outlives the outage; every other way down takes it.
            if mode.isDown, mode != .hold { state.epoch += 1 }
            state.mode = mode
            // Wakes accept(); the accept thread, which owns the socket, closes it and listens again when allowed.
            if mode.replacesListener, state.listenFD >= 0 { shutdown(state.listenFD, Int32(SHUT_RDWR)) }
        }
    }

    package func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        state.withLock { state in
            state.epoch += 1
            if state.listenFD >= 0 { shutdown(state.listenFD, Int32(SHUT_RDWR)) }
        }
    }

    deinit { stop() }

    /// Takes the proxies down and up together on a seeded random schedule for `seconds`,
    /// cycling through `downModes`; the last period is an outage, after which they are left up.
    /// Returns the schedule followed.
    package static func flap(
        _ proxies: [FaultProxy], seed: UInt64, up: ClosedRange<Double>, down: ClosedRange<Double>,
        downModes: [Mode], seconds: Double
    ) async -> [(mode: Mode, seconds: Double)] {
        var random = SeededRandom(seed: seed)
        var schedule: [(mode: Mode, seconds: Double)] = []
        let end = WallClock.monotonicNs() + UInt64(seconds * 1e9)
        var next = 0
        while WallClock.monotonicNs() < end || schedule.count % 2 == 1 {
            let mode = schedule.count % 2 == 0 ? Mode.pass : downModes[next % downModes.count]
            if mode.isDown { next += 1 }
            let range = mode.isDown ? down : up
            let length = Double.random(in: range, using: &random)
            for proxy in proxies { proxy.setMode(mode) }
            schedule.append((mode, length))
            try? await Task.sleep(for: .milliseconds(Int(length * 1000)))
        }
        for proxy in proxies { proxy.setMode(.pass) }
        return schedule
    }

    // MARK: - Accepting

    private func acceptLoop() {
        while !stopped.load(ordering: .relaxed) {
            let fd = state.withLock { $0.listenFD }
            let client = accept4(fd, nil, nil, Int32(SOCK_CLOEXEC.rawValue))
            if client >= 0 {
                serve(client)
                continue
            }
            if errno == EINTR { continue }
            // The listener was shut (refuse, drop, or stop): close it, and listen again once allowed.
            state.withLock { state in
                close(state.listenFD)
                state.listenFD = -1
            }
            while !stopped.load(ordering: .relaxed), mode.replacesListener {
                if mode == .drop { dropHandshakes() } else { usleep(5_000) }
            }
            if stopped.load(ordering: .relaxed) { return }
            relisten()
        }
        state.withLock { state in
            if state.listenFD >= 0 { close(state.listenFD) }
            state.listenFD = -1
        }
    }

    private func relisten() {
        for _ in 0..<400 {
            if let bound = try? IPv4Socket.bind(
                type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: UInt16(portValue), backlog: 64)
            {
                state.withLock { $0.listenFD = bound.descriptor.release() }
                return
            }
            usleep(5_000)
        }
        fatalError("FaultProxy could not listen on port \(portValue) again")
    }

    /// While the mode is `drop`: a listener on the port whose accept queue one connection of its
    /// own fills, so the kernel drops every other SYN and the relay's handshakes go unanswered.
    private func dropHandshakes() {
        guard
            let bound = try? IPv4Socket.bind(
                type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: UInt16(portValue), backlog: 0)
        else {
            usleep(5_000)
            return
        }
        let filler = IPv4Socket.connect(host: "127.0.0.1", port: portValue)
        while !stopped.load(ordering: .relaxed), mode == .drop { usleep(5_000) }
        try? filler?.close()
        try? bound.descriptor.close()
    }

    private func serve(_ client: Int32) {
        let (mode, epoch) = state.withLock { state in
            state.counters.connections += 1
            return (state.mode, state.epoch)
        }
        Thread { [self] in
            switch mode {
            case .pass, .resetMidResponse:
                guard let upstream = IPv4Socket.connect(host: "127.0.0.1", port: targetPort)?.release() else {
                    Self.reset(client)
                    return
                }
                let pair = Pair(client: client, upstream: upstream)
                Thread { [self] in pump(pair, up: true, epoch: epoch, cutAfterFirstChunk: false) }.start()
                pump(pair, up: false, epoch: epoch, cutAfterFirstChunk: mode == .resetMidResponse)
            case .blackHole:
                while receive(client, epoch: epoch, counted: true) != nil {}
                Self.reset(client)
            case .closeAtOnce:
                close(client)
            case .hold:
                holdThenCarry(client, epoch: epoch)
            case .drop:
                // Queued before the listener was replaced: as silent as the rest.
                while receive(client, epoch: epoch, counted: true) != nil {}
                Self.reset(client)
            case .closeAfterRequest:
                var request: [UInt8] = []
                while !Self.isComplete(request), let chunk = receive(client, epoch: epoch, counted: true) {
                    request += chunk
                }
                close(client)
            case .resetMidRequest, .refuse:
                _ = receive(client, epoch: epoch, counted: true)
                Self.reset(client)
            }
        }.start()
    }

    /// A connection accepted while held: what the relay sends is read and kept until the link
    /// returns, then carried to the server ahead of the rest; a connection the relay gave up on
    /// in the meantime is forgotten, as is every held one when the link goes down another way.
    private func holdThenCarry(_ client: Int32, epoch: Int) {
        var held: [UInt8] = []
        while mode == .hold, !stopped.load(ordering: .relaxed) {
            var pollFD = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
            guard poll(&pollFD, 1, 5) > 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            guard n > 0 else {
                close(client)
                return
            }
            count(up: Array(buffer[..<n]))
            held += buffer[..<n]
        }
        guard mode == .pass, currentEpoch == epoch,
            let upstream = IPv4Socket.connect(host: "127.0.0.1", port: targetPort)?.release()
        else {
            Self.reset(client)
            return
        }
        usleep(UInt32(latencyMs) * 1000)
        guard Self.sendAll(held[...], to: upstream) else {
            Self.reset(client)
            close(upstream)
            return
        }
        let pair = Pair(client: client, upstream: upstream)
        Thread { [self] in pump(pair, up: true, epoch: epoch, cutAfterFirstChunk: false) }.start()
        pump(pair, up: false, epoch: epoch, cutAfterFirstChunk: false)
    }

    // MARK: - Moving bytes

    /// Both ends of a forwarded connection; the second pump to finish closes them.
    private final class Pair: Sendable {
        let client: Int32
        let upstream: Int32
        private let finished = Atomic<Int>(0)
        let broken = Atomic<Bool>(false)

        init(client: Int32, upstream: Int32) {
            self.client = client
            self.upstream = upstream
        }

        /// Breaks the connection: both pumps stop within a poll period and the client sees a
        /// reset, with no FIN before it (a FIN would let it read what came first as a whole answer).
        func breakLink() {
            broken.store(true, ordering: .relaxed)
            shutdown(upstream, Int32(SHUT_RDWR))
        }

        func finish() {
            guard finished.add(1, ordering: .acquiringAndReleasing).newValue == 2 else { return }
            if broken.load(ordering: .relaxed) { FaultProxy.reset(client) } else { close(client) }
            close(upstream)
        }
    }

    /// Copies one direction until either end closes or the link goes down.
    ///
    /// A delay line, as a real link is: each chunk leaves the sending end once the bandwidth cap
    /// has serialised the bytes before it (this connection's and every other's going the same
    /// way), and arrives `latencyMs` later, while the chunks behind it are already on their way.
    /// (Sleeping the latency per chunk instead would make a round trip's worth of delay a cap on
    /// throughput, and pipelined requests pay it once each.)
    private func pump(_ pair: Pair, up: Bool, epoch: Int, cutAfterFirstChunk: Bool) {
        let (source, destination) = up ? (pair.client, pair.upstream) : (pair.upstream, pair.client)
        let line = DelayLine()
        let (bytesPerSecond, latencyNs) = (self.bytesPerSecond, UInt64(latencyMs) * 1_000_000)
        let readerDone = DispatchSemaphore(value: 0)
        Thread { [self] in
            defer { readerDone.signal() }
            while let chunk = receive(
                source, epoch: epoch, counted: up, maxBytes: bytesPerSecond.map { max(512, $0 / 20) } ?? 4096, of: pair)
            {
                if !up { state.withLock { $0.counters.bytesDown += chunk.count } }
                if currentEpoch != epoch {
                    // The link went down under this connection.
                    if mode == .blackHole || mode == .drop { continue }
                    pair.breakLink()
                    break
                }
                let now = WallClock.monotonicNs()
                let departure =
                    bytesPerSecond.map { rate in
                        let serialised = UInt64(Double(chunk.count) / Double(rate) * 1e9)
                        return departures.withLock { clocks in
                            if up {
                                clocks.up = max(clocks.up, now) + serialised
                                return clocks.up
                            }
                            clocks.down = max(clocks.down, now) + serialised
                            return clocks.down
                        }
                    } ?? now
                line.push(chunk, due: departure + latencyNs)
            }
            line.close()
        }.start()
        while let (chunk, sent) = line.pop() {
            var due = sent
            // Held on board while the link is down, then on its way: a latency after the return.
            var held = false
            while mode == .hold, !pair.broken.load(ordering: .relaxed), !stopped.load(ordering: .relaxed) {
                held = true
                usleep(5_000)
            }
            if held { due = max(due, WallClock.monotonicNs() + latencyNs) }
            let now = WallClock.monotonicNs()
            if due > now { usleep(UInt32((due - now) / 1000)) }
            if pair.broken.load(ordering: .relaxed) { break }
            let sending = cutAfterFirstChunk ? chunk.prefix(5) : chunk[...]
            if !Self.sendAll(sending, to: destination) { break }
            if cutAfterFirstChunk {
                pair.breakLink()
                break
            }
        }
        line.close()
        if !pair.broken.load(ordering: .relaxed) {
            shutdown(destination, Int32(SHUT_WR))
        }
        // The reader must be done with the socket before the pair closes it (its number could be reused).
        shutdown(source, Int32(SHUT_RD))
        readerDone.wait()
        pair.finish()
    }

    private var currentEpoch: Int { state.withLock { $0.epoch } }

    /// The next chunk from `fd`, or nil when it closed, failed, or (for connections that
    /// are not forwarded) the link came back up or the proxy stopped.
    private func receive(_ fd: Int32, epoch: Int, counted: Bool, maxBytes: Int = 4096, of pair: Pair? = nil) -> [UInt8]?
    {
        var buffer = [UInt8](repeating: 0, count: maxBytes)
        while true {
            if pair?.broken.load(ordering: .relaxed) == true { return nil }
            var pollFD = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pollFD, 1, 50)
            if ready < 0, errno == EINTR { continue }
            if ready == 0 {
                if stopped.load(ordering: .relaxed) { return nil }
                // Not forwarded (black hole): ends when the link changes again.
                if currentEpoch != epoch, mode == .pass || !counted { return nil }
                continue
            }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return nil }
            buffer.removeSubrange(n...)
            if counted { count(up: buffer) }
            return buffer
        }
    }

    private func count(up chunk: [UInt8]) {
        state.withLock { state in
            state.counters.bytesUp += chunk.count
            guard state.mode.isDown else { return }
            state.counters.bytesUpWhileDown += chunk.count
            for (method, payload) in Self.requestLines(in: chunk) {
                state.counters.requestsWhileDown[method, default: 0] += 1
            }
            let (probes, payloads) = Self.probesAndPayloads(in: chunk)
            state.counters.probesWhileDown += probes
            state.counters.payloadsWhileDown += payloads
        }
    }

    /// The request lines in a chunk (a line ending in ` HTTP/1.1`): each one's method and whether
    /// it carries a position (any method but GET, or a GET with a query). curl and the pipelined
    /// engine write a request's head in one piece, so a request line is not split across chunks in practice.
    static func requestLines(in chunk: [UInt8]) -> [(method: String, payload: Bool)] {
        let text = String(decoding: chunk, as: UTF8.self)
        return text.components(separatedBy: "\r\n").compactMap { line in
            guard line.hasSuffix(" HTTP/1.1"), let space = line.firstIndex(of: " ") else { return nil }
            let method = line[..<space]
            guard method.allSatisfy({ $0.isUppercase }) else { return nil }
            return (String(method), method != "GET" || line[space...].contains("?"))
        }
    }

    /// The probes (a GET naming no position, a Teltonika identification as the probe) and the
    /// payloads (HTTP requests carrying positions) that start in a chunk written up the link.
    static func probesAndPayloads(in chunk: [UInt8]) -> (probes: Int, payloads: Int) {
        let requests = requestLines(in: chunk)
        let payloads = requests.count(where: \.payload)
        return (requests.count - payloads + occurrences(of: teltonikaProbe, in: chunk), payloads)
    }

    /// The Teltonika probe's identification: binary Teltonika frames have no request line, so this
    /// is how the probes among them are told from payloads.
    package static let teltonikaProbe = Array(try! TeltonikaCodec.identification(uniqueID: TeltonikaProbe.uniqueID))

    static func occurrences(of needle: [UInt8], in chunk: [UInt8]) -> Int {
        guard chunk.count >= needle.count else { return 0 }
        return (0...(chunk.count - needle.count)).count { chunk[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    /// A whole HTTP request: the head and `Content-Length` bytes of body.
    static func isComplete(_ request: [UInt8]) -> Bool {
        let text = String(decoding: request, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n") else { return false }
        let head = text[..<end.lowerBound].lowercased()
        let length =
            head.components(separatedBy: "\r\n").first { $0.hasPrefix("content-length:") }
            .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
        return text.utf8.distance(from: end.upperBound.samePosition(in: text.utf8)!, to: text.utf8.endIndex) >= length
    }

    private static func sendAll(_ bytes: ArraySlice<UInt8>, to fd: Int32) -> Bool {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { return false }
            offset += sent
        }
        return true
    }

    /// Closes with a TCP reset (`SO_LINGER` 0) instead of a clean FIN.
    static func reset(_ fd: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
        close(fd)
    }
}

/// What a terminal does while its satellite is down (`../shared/LINKS.md`), as the proxy plays it.
package enum TerminalKind: String, Sendable, CaseIterable, CustomStringConvertible {
    /// Refused at once by the terminal's router; open connections cut.
    case refuse
    /// Accepted on board by a TCP accelerator and closed at once; open connections cut.
    case close
    /// Accepted on board and held silent, new and open connections alike; carried through on return.
    case hold
    /// No answer to the handshake; open connections silent.
    case drop

    /// The proxy's mode while the satellite is down.
    package var downMode: FaultProxy.Mode {
        switch self {
        case .refuse: .refuse
        case .close: .closeAtOnce
        case .hold: .hold
        case .drop: .drop
        }
    }

    package var description: String { rawValue }
}

import CLinux
import Foundation
import Glibc
import GeoRelayCore
import GeoRelayHTTP
import GeoRelaySpool
import Synchronization

/// The event loop's state; lives on the ingest thread except for the inbox and stop flag.
final class IngestLoop: @unchecked Sendable {
    let settings: IngestServer.Settings
    let epoll: Epoll
    private let listener: FileDescriptor
    private var listenFD: Int32 { listener.number }
    private let spool: Spool
    private let logger: Logger
    let decoder: LineDecoder
    private let inbox = Mutex<[IngestServer.Completion]>([])
    private let stopDeadline = Mutex<Int64?>(nil)
    let heartbeat = Heartbeat("ingest loop")
    /// A stall the test hook asked for, in milliseconds; 0 for none.
    private let pendingStallMs = Atomic<Int64>(0)

    // Loop-thread state.
    private var connections: [UInt64: IngestConnection] = [:]
    private var nextID: UInt64 = 1
    private var batch: [Position] = []
    private var batchTokens: [IngestServer.Token] = []
    var rejected: [String: Int64] = [:]
    private var listening = true
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    private var rejectLog = RateLimiter(perWindow: 20, windowMs: 10_000)
    private var inFlight = 0
    private let sources: SourceRouter
    /// Connections read in this wake-up: only their replies can have changed.
    private var active: [UInt64: IngestConnection] = [:]

    /// A connection with this many replies pending or bytes unsent is paused.
    static let maxUnresolved = 8192
    /// A fix cycle with no new sentence for this long is complete.
    static let nmeaQuietMs: Int64 = 1500
    static let maxOutput = 1 << 20
    private static let listenToken: UInt64 = 0

    init(settings: IngestServer.Settings, listener: FileDescriptor, spool: Spool, sources: SourceRouter, logger: Logger) throws(SystemError) {
        self.settings = settings
        self.listener = listener
        self.spool = spool
        self.logger = logger
        self.decoder = LineDecoder(maxFutureSeconds: settings.maxFutureSeconds)
        self.sources = sources
        self.epoll = try Epoll()
        try epoll.add(listenFD, token: Self.listenToken, events: EPOLLIN.rawValue)
    }

    func stall(for duration: Duration) {
        pendingStallMs.store(max(1, duration.wholeMilliseconds), ordering: .relaxed)
    }

    func requestStop(graceMs: Int64) {
        stopDeadline.withLock { $0 = WallClock.monotonicMs() + graceMs }
    }

    func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        logger.info("listening on \(settings.socketPath)")
        // Bounded, so an idle loop turns over and beats: only a stuck turn ages the heartbeat.
        let turnMs = Int32(clamping: max(1, settings.turnInterval.wholeMilliseconds))
        while true {
            let stallMs = pendingStallMs.exchange(0, ordering: .relaxed)
            if stallMs > 0 { Thread.sleep(forTimeInterval: Double(stallMs) / 1000) }
            let deadline = stopDeadline.withLock { $0 }
            if let deadline {
                if listening { stopListening() }
                if inFlight == 0 || WallClock.monotonicMs() >= deadline { break }
            }
            var timeout = turnMs
            if let deadline { timeout = min(timeout, Int32(clamping: max(1, deadline - WallClock.monotonicMs()))) }
            // A fix cycle held open wakes the loop once a second to end it if the receiver went quiet.
            let holdsNMEA = connections.values.contains { $0.nmeaHeldSinceMs != nil }
            if holdsNMEA { timeout = min(timeout, 1000) }
            let count = epoll.wait(into: &events, timeoutMs: timeout)
            heartbeat.beat()
            // Fix times are judged against the wall clock (a step back ignored); quiet periods by the monotonic one.
            let nowMs = WallClock.latestMs()
            if holdsNMEA {
                let monotonic = WallClock.monotonicMs()
                for connection in connections.values {
                    if let since = connection.nmeaHeldSinceMs, monotonic - since >= Self.nmeaQuietMs {
                        flushNMEA(connection, nowMs: nowMs)
                        active[connection.id] = connection
                    }
                }
            }
            for index in 0..<count {
                let event = events[index]
                let token = event.data.u64
                if token == Epoll.wakeToken {
                    epoll.drainWake()
                } else if token == Self.listenToken {
                    acceptAll()
                } else if let connection = connections[token] {
                    handle(connection, events: event.events, nowMs: nowMs)
                }
            }
            submitBatch()
            applyCompletions()
        }
        for connection in connections.values {
            _ = connection.flush()
            closeConnection(connection)
        }
        flushRejectedCounters()
        logger.info("ingest stopped")
    }

    // MARK: - Accepting

    private func acceptAll() {
        while listening {
            let accepted: IOResult<Int32>
            do throws(SystemError) {
                accepted = try syscall(blocking: true, "accept") { georelay_accept4(listenFD, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)) }
            } catch {
                logger.warning("\(error)")
                return
            }
            guard case .processed(let fd) = accepted else { return }
            let socket = FileDescriptor(adopting: fd)
            if connections.count >= settings.maxConnections {
                logger.warning("refused a collector: \(settings.maxConnections) connections already open (ingest.maxConnections)")
                try? socket.close()
                continue
            }
            let connection = IngestConnection(id: nextID, socket: socket)
            connection.nmea.accuracyPerHDOP = settings.nmeaAccuracyPerHDOP
            nextID += 1
            do {
                try epoll.add(fd, token: connection.id, events: EPOLLIN.rawValue | EPOLLRDHUP.rawValue)
                connections[connection.id] = connection
            } catch {
                logger.warning("cannot watch a new connection: \(error)")
                try? socket.close()
            }
        }
    }

    private func stopListening() {
        listening = false
        epoll.remove(listenFD)
        try? listener.close()
        unlink(settings.socketPath)
        // Read nothing more; answer what was read.
        for connection in connections.values {
            connection.inputClosed = true
            updateInterest(connection)
        }
    }

    // MARK: - Reading

    private func handle(_ connection: IngestConnection, events: UInt32, nowMs: Int64) {
        if events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0, events & EPOLLIN.rawValue == 0 {
            closeConnection(connection)
            return
        }
        if events & EPOLLOUT.rawValue != 0 {
            if !connection.flush() {
                closeConnection(connection)
                return
            }
        }
        if events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue) != 0, !connection.readPaused, !connection.inputClosed {
            read(connection, nowMs: nowMs)
        }
        finishIfDone(connection)
    }

    private func read(_ connection: IngestConnection, nowMs: Int64) {
        active[connection.id] = connection
        let received = readBuffer.withUnsafeMutableBytes { raw in Result { () throws(SystemError) in try connection.socket.read(into: raw) } }
        guard case .success(let result) = received else {
            closeConnection(connection)
            return
        }
        guard case .processed(let n) = result else { return }
        if n > 0 {
            readBuffer.withUnsafeBufferPointer { buffer in
                consume(UnsafeBufferPointer(rebasing: buffer[0..<n]), connection: connection, nowMs: nowMs)
            }
        } else if n == 0 {
            // The collector is done sending; a last line without a newline still counts.
            if !connection.input.isEmpty, !connection.discarding {
                let line = connection.input
                connection.input.removeAll()
                line.withUnsafeBufferPointer { processLine($0, connection: connection, nowMs: nowMs) }
            }
            flushNMEA(connection, nowMs: nowMs)
            connection.inputClosed = true
            updateInterest(connection)
        }
    }

    /// Splits bytes into lines, carrying a partial line over to the next read.
    private func consume(_ bytes: UnsafeBufferPointer<UInt8>, connection: IngestConnection, nowMs: Int64) {
        var start = 0
        let max = settings.maxLineBytes
        while start < bytes.count {
            guard let newline = firstNewline(bytes, from: start) else {
                let rest = UnsafeBufferPointer(rebasing: bytes[start...])
                if connection.discarding { return }
                if connection.input.count + rest.count > max + 1 {
                    // Longer than any allowed line: answer now, skip to its newline.
                    connection.input.removeAll()
                    connection.discarding = true
                    reject(.tooLong("line longer than \(max) bytes (ingest.maxLineBytes)"), connection: connection)
                } else {
                    connection.input.append(contentsOf: rest)
                }
                return
            }
            let piece = UnsafeBufferPointer(rebasing: bytes[start..<newline])
            start = newline + 1
            if connection.discarding {
                connection.discarding = false
                continue
            }
            if connection.input.isEmpty {
                processLine(piece, connection: connection, nowMs: nowMs)
            } else {
                connection.input.append(contentsOf: piece)
                let line = connection.input
                connection.input.removeAll(keepingCapacity: true)
                line.withUnsafeBufferPointer { processLine($0, connection: connection, nowMs: nowMs) }
            }
        }
    }

    private func firstNewline(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard start < bytes.count, let base = bytes.baseAddress else { return nil }
        guard let found = memchr(base + start, 0x0A, bytes.count - start) else { return nil }
        return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
    }

    private func processLine(_ raw: UnsafeBufferPointer<UInt8>, connection: IngestConnection, nowMs: Int64) {
        var line = raw
        if let last = line.last, last == 0x0D { line = UnsafeBufferPointer(rebasing: line[0..<(line.count - 1)]) }
        if line.count > settings.maxLineBytes {
            reject(.tooLong("line of \(line.count) bytes is longer than \(settings.maxLineBytes) (ingest.maxLineBytes)"), connection: connection)
            return
        }
        do {
            switch try decoder.decode(line, defaultDevice: connection.device, nowMs: nowMs) {
            case .position(let position):
                let slot = connection.acks ? connection.addSlot(nil) : nil
                enqueue(position, connection: connection, slots: slot.map { [$0] } ?? [])
            case .nmea(let sentence):
                feed(sentence, connection: connection, nowMs: nowMs)
            case .hello(let device, let ack):
                if let device { connection.device = device }
                if let ack { connection.acks = ack }
                if connection.acks { _ = connection.addSlot("skip hello") }
            case .skip(let reason):
                if connection.acks { _ = connection.addSlot("skip \(reason)") }
            }
        } catch {
            reject(error, connection: connection, line: line)
        }
    }

    func enqueue(_ position: Position, connection: IngestConnection, slots: [UInt64]) {
        batch.append(position)
        batchTokens.append(IngestServer.Token(connection: connection.id, slots: slots))
        inFlight += 1
        guard let device = sources.route(position) else { return }
        // The active receiver's position also goes in under the device, in the same commit.
        batch.append(device)
        batchTokens.append(IngestServer.Token(connection: connection.id, slots: []))
        inFlight += 1
    }

    func reject(_ error: IngestError, connection: IngestConnection, line: UnsafeBufferPointer<UInt8>? = nil) {
        rejected["ingest.rejected.\(error.code)", default: 0] += 1
        // Counted per receiver too, so the health check can name the one sending fixes without a time.
        if let device = error.untimedDevice { rejected["ingest.untimed.\(device)", default: 0] += 1 }
        if connection.acks {
            _ = connection.addSlot("err \(error.code) \(error.message)")
        } else if rejectLog.allow(nowMs: WallClock.monotonicMs()) {
            let excerpt = line.map { String(decoding: UnsafeBufferPointer(rebasing: $0.prefix(80)), as: UTF8.self) } ?? ""
            logger.warning("rejected line (\(error.code)): \(error.message)\(excerpt.isEmpty ? "" : " in \"\(excerpt)\"")")
        }
    }

    // MARK: - Spool hand-off

    private func submitBatch() {
        flushRejectedCounters()
        for connection in active.values { deliverReplies(connection) }
        active.removeAll(keepingCapacity: true)
        guard !batch.isEmpty else { return }
        let tokens = batchTokens
        let wakeup = epoll.wakeup
        spool.append(batch) { [self] results in
            inbox.withLock { $0.append(IngestServer.Completion(tokens: tokens, results: results)) }
            Epoll.wake(wakeup)
        }
        batch.removeAll(keepingCapacity: true)
        batchTokens.removeAll(keepingCapacity: true)
    }

    private func flushRejectedCounters() {
        if !rejected.isEmpty {
            spool.add(counters: rejected)
            rejected.removeAll()
        }
    }

    private func applyCompletions() {
        let completions = inbox.withLock { inbox in
            defer { inbox.removeAll() }
            return inbox
        }
        guard !completions.isEmpty else { return }
        var touched: [UInt64: IngestConnection] = [:]
        var failures: [String: Int64] = [:]
        for completion in completions {
            inFlight -= completion.tokens.count
            for (token, result) in zip(completion.tokens, completion.results) {
                let reply: String
                switch result {
                case .stored(let seq), .duplicate(let seq), .conflict(let seq):
                    reply = "ok \(seq)"
                case .failed(let error):
                    failures["ingest.rejected.\(error.code)", default: 0] += 1
                    reply = "err \(error.code) \(error.message)"
                }
                guard !token.slots.isEmpty, let connection = connections[token.connection] else { continue }
                for slot in token.slots { connection.resolve(slot, reply) }
                touched[connection.id] = connection
            }
        }
        if !failures.isEmpty { spool.add(counters: failures) }
        for connection in touched.values {
            deliverReplies(connection)
            finishIfDone(connection)
        }
    }

    // MARK: - Writing and flow control

    private func deliverReplies(_ connection: IngestConnection) {
        connection.collectReplies()
        if connection.pendingOutput > 0, !connection.flush() {
            closeConnection(connection)
            return
        }
        updateInterest(connection)
    }

    /// Pauses reading from a collector that is far ahead of its replies, and
    /// asks for writability while replies wait for socket space.
    private func updateInterest(_ connection: IngestConnection) {
        guard connections[connection.id] != nil else { return }
        let pause = connection.unresolved >= Self.maxUnresolved || connection.pendingOutput >= Self.maxOutput
        let wantsWrite = connection.pendingOutput > 0
        guard pause != connection.readPaused || wantsWrite != connection.wantsWrite else { return }
        connection.readPaused = pause
        connection.wantsWrite = wantsWrite
        var events: UInt32 = 0
        if !pause, !connection.inputClosed { events |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue }
        if wantsWrite { events |= EPOLLOUT.rawValue }
        try? epoll.modify(connection.fd, token: connection.id, events: events)
    }

    private func finishIfDone(_ connection: IngestConnection) {
        guard connections[connection.id] != nil else { return }
        if connection.inputClosed {
            // Make sure a closed input stops level-triggered read events.
            connection.readPaused = !connection.readPaused
            updateInterest(connection)
        }
        if connection.finished { closeConnection(connection) }
    }

    private func closeConnection(_ connection: IngestConnection) {
        guard connections.removeValue(forKey: connection.id) != nil else { return }
        epoll.remove(connection.fd)
        try? connection.socket.close()
    }
}

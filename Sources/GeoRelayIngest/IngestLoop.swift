import CLinux
import GeoRelayCore
import GeoRelayHTTP
import GeoRelaySpool
import Glibc
import Synchronization

/// The event loop's state; lives on the ingest thread except for the inbox and stop flag.
final class IngestLoop: @unchecked Sendable {
    let settings: IngestServer.Settings
    let epoll: Epoll
    private let listener: FileDescriptor
    private var listenFD: Int32 { listener.number }
    private let spool: Spool
    private let logger: Logger
    /// What every connection's session shares: the decoder, the router, the clocks.
    let rules: IngestSession.Rules
    private let inbox = Mutex<[IngestServer.Completion]>([])
    private let stopDeadline = Mutex<Int64?>(nil)
    let heartbeat: Heartbeat
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
    /// Connections read in this wake-up: only their replies can have changed.
    private var active: [UInt64: IngestConnection] = [:]

    /// A connection with this many replies pending or bytes unsent is paused.
    static let maxUnresolved = 8192
    static let maxOutput = 1 << 20
    private static let listenToken: UInt64 = 0

    init(
        settings: IngestServer.Settings, listener: FileDescriptor, spool: Spool, rules: IngestSession.Rules,
        logger: Logger
    ) throws(SystemError) {
        self.settings = settings
        self.listener = listener
        self.spool = spool
        self.logger = logger
        self.rules = rules
        heartbeat = Heartbeat("ingest loop", clock: settings.clock)
        self.epoll = try Epoll()
        try epoll.add(listenFD, token: Self.listenToken, events: EPOLLIN.rawValue)
    }

    /// The relay's monotonic time in milliseconds: a stop's grace and the log's rate are measured on it.
    private func nowMs() -> Int64 { settings.clock.monotonicMs() }

    func stall(for duration: Duration) {
        pendingStallMs.store(max(1, duration.wholeMilliseconds), ordering: .relaxed)
    }

    /// Asks the loop to stop within `graceMs`; a second request never extends the first's deadline.
    func requestStop(graceMs: Int64) {
        let deadline = nowMs() + graceMs
        stopDeadline.withLock { $0 = min($0 ?? deadline, deadline) }
    }

    func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        logger.info("listening on \(settings.socketPath)")
        // Bounded, so an idle loop turns over and beats: only a stuck turn ages the heartbeat.
        let turnMs = Int32(clamping: max(1, settings.turnInterval.wholeMilliseconds))
        while true {
            let stallMs = pendingStallMs.exchange(0, ordering: .relaxed)
            if stallMs > 0 { sleepBlocking(seconds: Double(stallMs) / 1000) }
            let deadline = stopDeadline.withLock { $0 }
            if let deadline {
                if listening { stopListening() }
                if inFlight == 0 || nowMs() >= deadline { break }
            }
            var timeout = turnMs
            if let deadline { timeout = min(timeout, Int32(clamping: max(1, deadline - nowMs()))) }
            // A fix cycle held open wakes the loop once a second to end it if the receiver went quiet.
            let holdsNMEA = connections.values.contains { $0.session.holdsCycle }
            if holdsNMEA { timeout = min(timeout, 1000) }
            let count = epoll.wait(into: &events, timeoutMs: timeout)
            heartbeat.beat()
            if holdsNMEA {
                for connection in connections.values where connection.session.holdsCycle {
                    perform(connection.session.tick(), connection: connection)
                    active[connection.id] = connection
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
                    handle(connection, events: event.events)
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
                accepted = try syscall(blocking: true, "accept") {
                    georelay_accept4(listenFD, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
                }
            } catch {
                logger.warning("\(error)")
                return
            }
            guard case .processed(let fd) = accepted else { return }
            let socket = FileDescriptor(adopting: fd)
            if connections.count >= settings.maxConnections {
                logger.warning(
                    "refused a collector: \(settings.maxConnections) connections already open (ingest.maxConnections)")
                try? socket.close()
                continue
            }
            let connection = IngestConnection(id: nextID, socket: socket, session: IngestSession(rules: rules))
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

    private func handle(_ connection: IngestConnection, events: UInt32) {
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
            read(connection)
        }
        finishIfDone(connection)
    }

    private func read(_ connection: IngestConnection) {
        active[connection.id] = connection
        let received = readBuffer.withUnsafeMutableBytes { raw in
            Result { () throws(SystemError) in try connection.socket.read(into: raw) }
        }
        guard case .success(let result) = received else {
            closeConnection(connection)
            return
        }
        guard case .processed(let n) = result else { return }
        if n > 0 {
            readBuffer.withUnsafeBufferPointer { buffer in
                consume(UnsafeBufferPointer(rebasing: buffer[0..<n]), connection: connection)
            }
        } else if n == 0 {
            // The collector is done sending; a last line without a newline still counts.
            if !connection.input.isEmpty, !connection.discarding {
                let line = connection.input
                connection.input.removeAll()
                line.withUnsafeBufferPointer { receive($0, connection: connection) }
            }
            perform(connection.session.finish(), connection: connection)
            connection.inputClosed = true
            updateInterest(connection)
        }
    }

    /// Splits bytes into lines, carrying a partial line over to the next read.
    private func consume(_ bytes: UnsafeBufferPointer<UInt8>, connection: IngestConnection) {
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
                    perform([connection.session.refuseOverlongLine()], connection: connection)
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
                receive(piece, connection: connection)
            } else {
                connection.input.append(contentsOf: piece)
                let line = connection.input
                connection.input.removeAll(keepingCapacity: true)
                line.withUnsafeBufferPointer { receive($0, connection: connection) }
            }
        }
    }

    private func firstNewline(_ bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard start < bytes.count, let base = bytes.baseAddress else { return nil }
        guard let found = memchr(base + start, 0x0A, bytes.count - start) else { return nil }
        return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
    }

    private func receive(_ line: UnsafeBufferPointer<UInt8>, connection: IngestConnection) {
        perform(connection.session.receive(line: line), connection: connection)
    }

    /// Carries out what a connection's session asked for: positions into the next batch,
    /// rejections counted (and logged, rate-limited, when the collector is not told).
    private func perform(_ actions: [IngestSession.Action], connection: IngestConnection) {
        for action in actions {
            switch action {
            case .store(let positions, let ticket):
                for (index, position) in positions.enumerated() {
                    batch.append(position)
                    // The first answers the ticket's lines; a routed copy answers none.
                    batchTokens.append(IngestServer.Token(connection: connection.id, ticket: index == 0 ? ticket : nil))
                    inFlight += 1
                }
            case .reject(let error, let log):
                rejected["ingest.rejected.\(error.code)", default: 0] += 1
                // Counted per receiver too, so the health check can name the one sending fixes without a time.
                if let device = error.untimedDevice { rejected["ingest.untimed.\(device)", default: 0] += 1 }
                if let log, rejectLog.allow(nowMs: nowMs()) { logger.warning(log) }
            }
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
                let outcome: Result<Int64, IngestError>
                switch result {
                case .stored(let seq), .duplicate(let seq), .conflict(let seq):
                    outcome = .success(seq)
                case .failed(let error):
                    failures["ingest.rejected.\(error.code)", default: 0] += 1
                    outcome = .failure(error)
                }
                guard let ticket = token.ticket, !ticket.lines.isEmpty, let connection = connections[token.connection]
                else { continue }
                connection.session.stored(ticket, outcome)
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

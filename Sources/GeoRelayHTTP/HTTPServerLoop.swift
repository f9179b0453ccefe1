import CLinux
import GeoRelayCore
import Glibc
import Synchronization

/// An HTTP listener's event loop: accepts, reads and parses requests, hands them to the
/// handler pool, writes the answers, and enforces ``HTTPListener/Limits``.
///
/// Lives on the listener's thread except for the inbox of answers and the stop flag.
/// Level-triggered epoll; each connection's interest follows its phase, so a connection with
/// a request in hand is not read (pipelined requests wait in the kernel's buffer, bounded by
/// TCP's window) and one whose answer is unsent waits only for writability.
final class HTTPServerLoop: @unchecked Sendable {
    let statistics = Mutex(HTTPListener.Statistics())
    let epoll: Epoll
    /// Shared with `HTTPListener`, which may shut it down from another thread; only the loop closes it.
    let listener: FileDescriptor
    var listenFD: Int32 { listener.number }
    let what: String
    let limits: HTTPListener.Limits
    let logger: Logger?
    /// The relay's: deadlines, lingering and the warnings' windows are measured on its monotonic time.
    let clock: any RelayClock
    let inbox = Mutex<[(UInt64, HTTPServerResponse)]>([])
    let stopRequested = Atomic<Bool>(false)
    /// Set before `stop()` shuts the listening socket down, so the loop takes the accept error that
    /// follows for what it is (and leaves the descriptor alone until `stopRequested`).
    let stopAnnounced = Atomic<Bool>(false)
    var pool: HTTPHandlerPool!

    // Loop-thread state.
    var connections: [UInt64: HTTPConnection] = [:]
    var nextID: UInt64 = 1
    var listening = true
    var stopping = false
    var acceptPausedUntilMs: Int64?
    var lastSweepMs: Int64 = 0
    var scratch = [UInt8](repeating: 0, count: 64 * 1024)
    /// One warning per kind (eviction, refusal, each status answered, accept errors) per window,
    /// so a flood of one kind neither fills the log nor hides the others.
    var warnings: [String: RateLimiter] = [:]
    let requestTimeoutMs: Int64
    let idleTimeoutMs: Int64

    static let listenToken: UInt64 = 0
    /// How often deadlines are checked: timeouts are this much late at most.
    static let sweepIntervalMs: Int64 = 250
    /// A closing connection is drained this long, or this many bytes, at most.
    static let lingerMs: Int64 = 2000
    static let lingerBytes = 4 << 20
    /// How long accepting pauses when the process is out of descriptors and nothing can be evicted.
    static let acceptPauseMs: Int64 = 100
    static let continueBytes = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    init(
        listener: FileDescriptor, what: String, limits: HTTPListener.Limits, logger: Logger?,
        clock: any RelayClock, handler: @escaping @Sendable (HTTPServerRequest) -> HTTPServerResponse
    ) throws(SystemError) {
        self.listener = listener
        self.what = what
        self.limits = limits
        self.logger = logger
        self.clock = clock
        requestTimeoutMs = max(1, limits.requestTimeout.wholeMilliseconds)
        idleTimeoutMs = max(1, limits.idleTimeout.wholeMilliseconds)
        epoll = try Epoll()
        try epoll.add(listenFD, token: Self.listenToken, events: EPOLLIN.rawValue)
        // Weak: the pool's threads must not keep the loop (and its descriptors) alive once stopped.
        pool = HTTPHandlerPool(threads: limits.handlerThreads, name: "georelay-http-handler", handler: handler) {
            [weak self] id, response in
            self?.complete(id, response)
        }
    }

    /// The clock's monotonic time in milliseconds, the unit of every deadline here.
    func monotonicMs() -> Int64 { clock.monotonicMs() }

    func announceStop() {
        stopAnnounced.store(true, ordering: .releasing)
    }

    func requestStop() {
        stopRequested.store(true, ordering: .releasing)
        Epoll.wake(epoll.wakeup)
    }

    /// From a handler thread: the answer for connection `id`.
    func complete(_ id: UInt64, _ response: HTTPServerResponse) {
        inbox.withLock { $0.append((id, response)) }
        Epoll.wake(epoll.wakeup)
    }

    func run() {
        pool.start()
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        var stopDeadlineMs: Int64?
        while true {
            var now = monotonicMs()
            if stopDeadlineMs == nil, stopRequested.load(ordering: .acquiring) {
                stopDeadlineMs = now + Self.lingerMs
                beginStop()
            }
            if let stopDeadlineMs, connections.isEmpty || now >= stopDeadlineMs { break }
            // Nothing can time out without connections (or a paused accept): wait for ever then.
            let timeout: Int32 = connections.isEmpty && acceptPausedUntilMs == nil ? -1 : Int32(Self.sweepIntervalMs)
            let count = epoll.wait(into: &events, timeoutMs: timeout)
            for index in 0..<count {
                let event = events[index]
                switch event.data.u64 {
                case Epoll.wakeToken: epoll.drainWake()
                case Self.listenToken: acceptAll()
                case let token: if let connection = connections[token] { service(connection, events: event.events) }
                }
            }
            deliverAnswers()
            now = monotonicMs()
            if now - lastSweepMs >= Self.sweepIntervalMs {
                lastSweepMs = now
                sweep(nowMs: now)
            }
        }
        for connection in Array(connections.values) { closeConnection(connection) }
        if listening { stopListening() }
        pool.stop()
    }

    // MARK: - Accepting

    func acceptAll() {
        while listening {
            let accepted: IOResult<Int32>
            let failure: SystemError?
            do throws(SystemError) {
                accepted = try syscall(blocking: true, "accept") {
                    georelay_accept4(listenFD, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
                }
                failure = nil
            } catch {
                accepted = .wouldBlock
                failure = error
            }
            let now = monotonicMs()
            if let failure {
                let code = failure.errno
                switch code {
                case ECONNABORTED: continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Out of descriptors: make room from the idle, or stop the level-triggered listener spinning.
                    if evictOne(nowMs: now) { continue }
                    warn(
                        "accept",
                        "cannot accept: \(String(cString: strerror(code))); pausing for \(Self.acceptPauseMs) ms",
                        nowMs: now)
                    pauseAccepting(nowMs: now)
                    return
                default:
                    // Shut down by stop(): quiet until the loop sees the stop and closes the descriptor.
                    if !stopAnnounced.load(ordering: .acquiring) {
                        warn("accept", "accept failed: \(String(cString: strerror(code)))", nowMs: now)
                    }
                    pauseAccepting(nowMs: now)
                    return
                }
            }
            guard case .processed(let fd) = accepted else { return }
            let socket = FileDescriptor(adopting: fd)
            if connections.count >= limits.maxConnections, !evictOne(nowMs: now) {
                let refused = statistics.withLock { statistics in
                    statistics.refused += 1
                    return statistics.refused
                }
                warn(
                    "refused",
                    "answered 503 to a new connection: all \(limits.maxConnections) open connections have a request with the handler (\(refused) refused so far)",
                    nowMs: now)
                let answer = HTTPRequestError.serviceUnavailable("every connection is busy").response.serialized(
                    close: true)
                _ = answer.withUnsafeBytes { try? socket.send($0, flags: Int32(MSG_DONTWAIT)) }
                try? socket.close()
                continue
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let interest = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
            let connection = HTTPConnection(id: nextID, socket: socket, nowMs: now, interest: interest)
            nextID += 1
            do {
                try epoll.add(fd, token: connection.id, events: interest)
            } catch {
                warn("accept", "cannot watch a new connection: \(error)", nowMs: now)
                try? socket.close()
                continue
            }
            connections[connection.id] = connection
            statistics.withLock {
                $0.accepted += 1
                $0.open = connections.count
            }
        }
    }

    /// Closes the connection that matters least to make room: one already answered and closing,
    /// else the longest idle, else the one that has been sending its request longest (a slow
    /// client before a phone). False when every connection has a request with the handler or an
    /// answer on its way.
    ///
    /// A connection accepted in the same burst as a flood of others has its request in the kernel
    /// before the loop reads it: it looks idle (`awaiting`) but is a request arriving, so it
    /// counts as the newest of the partial ones, not as idle.
    func evictOne(nowMs: Int64) -> Bool {
        var awaiting: [HTTPConnection] = []
        var partial: (HTTPConnection, Int64)?
        func consider(_ connection: HTTPConnection, since: Int64) {
            // Ties (the same millisecond) go to the older connection: ids grow with each accept.
            if partial == nil || (since, connection.id) < (partial!.1, partial!.0.id) { partial = (connection, since) }
        }
        var lingering: HTTPConnection?
        for connection in connections.values {
            switch connection.phase {
            case .awaiting: awaiting.append(connection)
            case .head(let since), .body(_, let since): consider(connection, since: since)
            case .lingering: lingering = connection
            case .handling, .writing: break
            }
            if lingering != nil { break }
        }
        var idle: HTTPConnection?
        if lingering == nil {
            awaiting.sort { ($0.lastActivityMs, $0.id) < ($1.lastActivityMs, $1.id) }
            for connection in awaiting {
                if !connection.hasUnreadInput {
                    idle = connection
                    break
                }
                consider(connection, since: .max)
            }
        }
        guard let victim = lingering ?? idle ?? partial?.0 else { return false }
        // Counted before the close, as idle closes are.
        let evicted = statistics.withLock { statistics in
            statistics.evicted += 1
            return statistics.evicted
        }
        closeConnection(victim)
        warn(
            "evicted",
            "\(limits.maxConnections) connections open: closed the longest idle one to let a new one in (\(evicted) so far)",
            nowMs: nowMs)
        return true
    }

    func pauseAccepting(nowMs: Int64) {
        guard listening, acceptPausedUntilMs == nil else { return }
        epoll.remove(listenFD)
        acceptPausedUntilMs = nowMs + Self.acceptPauseMs
    }

    func stopListening() {
        guard listening else { return }
        listening = false
        if acceptPausedUntilMs == nil { epoll.remove(listenFD) }
        acceptPausedUntilMs = nil
        try? listener.close()
    }

    /// Stops accepting and closes what has no request with the handler; the rest close once answered.
    func beginStop() {
        stopping = true
        stopListening()
        for connection in Array(connections.values) {
            switch connection.phase {
            case .handling, .writing: break
            default: closeConnection(connection)
            }
        }
    }

    // MARK: - Deadlines

    func sweep(nowMs now: Int64) {
        if let paused = acceptPausedUntilMs, now >= paused, listening {
            acceptPausedUntilMs = nil
            do {
                try epoll.add(listenFD, token: Self.listenToken, events: EPOLLIN.rawValue)
            } catch {
                acceptPausedUntilMs = now + Self.acceptPauseMs
            }
        }
        for connection in Array(connections.values) {
            switch connection.phase {
            case .awaiting:
                if now - connection.lastActivityMs >= idleTimeoutMs {
                    // Counted before the close: whoever sees the close sees it counted.
                    statistics.withLock { $0.idleClosed += 1 }
                    closeConnection(connection)
                }
            case .head(let since), .body(_, let since):
                if now - since >= requestTimeoutMs {
                    fail(
                        connection, .requestTimeout("the request was not whole within \(limits.requestTimeout)"),
                        nowMs: now)
                }
            case .writing(_, let since):
                // A client that does not read its answer holds nothing for longer than this.
                if now - since >= requestTimeoutMs { closeConnection(connection) }
            case .lingering(let until, _):
                if now >= until { closeConnection(connection) }
            case .handling:
                break
            }
        }
    }

    func closeConnection(_ connection: HTTPConnection) {
        guard !connection.isClosed, connections.removeValue(forKey: connection.id) != nil else { return }
        connection.isClosed = true
        epoll.remove(connection.fd)
        try? connection.socket.close()
        connection.input = []
        connection.output = []
        statistics.withLock { $0.open = connections.count }
    }

    func warn(_ kind: String, _ message: String, nowMs: Int64) {
        guard let logger, warnings[kind, default: RateLimiter(perWindow: 1, windowMs: 10_000)].allow(nowMs: nowMs)
        else { return }
        logger.warning("\(what): \(message)")
    }
}

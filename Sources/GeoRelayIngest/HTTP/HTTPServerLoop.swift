import CLinux
import Foundation
import Glibc
import GeoRelayCore
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
    private let epoll: Epoll
    private let listenFD: Int32
    private let what: String
    private let limits: HTTPListener.Limits
    private let logger: Logger?
    private let inbox = Mutex<[(UInt64, HTTPServerResponse)]>([])
    private let stopRequested = Atomic<Bool>(false)
    /// Set before `stop()` shuts the listening socket down, so the loop takes the accept error that
    /// follows for what it is (and leaves the descriptor alone until `stopRequested`).
    private let stopAnnounced = Atomic<Bool>(false)
    private var pool: HTTPHandlerPool!

    // Loop-thread state.
    private var connections: [UInt64: HTTPConnection] = [:]
    private var nextID: UInt64 = 1
    private var listening = true
    private var stopping = false
    private var acceptPausedUntilMs: Int64?
    private var lastSweepMs: Int64 = 0
    private var scratch = [UInt8](repeating: 0, count: 64 * 1024)
    private var warnings = RateLimiter(perWindow: 5, windowMs: 60_000)
    private let requestTimeoutMs: Int64
    private let idleTimeoutMs: Int64

    private static let listenToken: UInt64 = 0
    /// How often deadlines are checked: timeouts are this much late at most.
    private static let sweepIntervalMs: Int64 = 250
    /// A closing connection is drained this long, or this many bytes, at most.
    private static let lingerMs: Int64 = 2000
    private static let lingerBytes = 4 << 20
    /// How long accepting pauses when the process is out of descriptors and nothing can be evicted.
    private static let acceptPauseMs: Int64 = 100
    private static let continueBytes = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    init(listenFD: Int32, what: String, limits: HTTPListener.Limits, logger: Logger?,
         handler: @escaping @Sendable (HTTPServerRequest) -> HTTPServerResponse) throws(SystemError) {
        self.listenFD = listenFD
        self.what = what
        self.limits = limits
        self.logger = logger
        requestTimeoutMs = max(1, limits.requestTimeout.wholeMilliseconds)
        idleTimeoutMs = max(1, limits.idleTimeout.wholeMilliseconds)
        epoll = try Epoll()
        try epoll.add(listenFD, token: Self.listenToken, events: EPOLLIN.rawValue)
        // Weak: the pool's threads must not keep the loop (and its descriptors) alive once stopped.
        pool = HTTPHandlerPool(threads: limits.handlerThreads, name: "georelay-http-handler", handler: handler) { [weak self] id, response in
            self?.complete(id, response)
        }
    }

    func announceStop() {
        stopAnnounced.store(true, ordering: .releasing)
    }

    func requestStop() {
        stopRequested.store(true, ordering: .releasing)
        Epoll.wake(epoll.wakeFD)
    }

    /// From a handler thread: the answer for connection `id`.
    private func complete(_ id: UInt64, _ response: HTTPServerResponse) {
        inbox.withLock { $0.append((id, response)) }
        Epoll.wake(epoll.wakeFD)
    }

    func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        var stopDeadlineMs: Int64?
        while true {
            var now = WallClock.monotonicMs()
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
            now = WallClock.monotonicMs()
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

    private func acceptAll() {
        while listening {
            let fd = georelay_accept4(listenFD, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            let now = WallClock.monotonicMs()
            if fd < 0 {
                let code = errno
                switch code {
                case EINTR, ECONNABORTED: continue
                case EAGAIN, EWOULDBLOCK: return
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Out of descriptors: make room from the idle, or stop the level-triggered listener spinning.
                    if evictOne(nowMs: now) { continue }
                    warn("cannot accept: \(String(cString: strerror(code))); pausing for \(Self.acceptPauseMs) ms", nowMs: now)
                    pauseAccepting(nowMs: now)
                    return
                default:
                    // Shut down by stop(): quiet until the loop sees the stop and closes the descriptor.
                    if !stopAnnounced.load(ordering: .acquiring) { warn("accept failed: \(String(cString: strerror(code)))", nowMs: now) }
                    pauseAccepting(nowMs: now)
                    return
                }
            }
            if connections.count >= limits.maxConnections, !evictOne(nowMs: now) {
                statistics.withLock { $0.refused += 1 }
                warn("refused a connection: all \(limits.maxConnections) open connections have a request with the handler", nowMs: now)
                let answer = HTTPRequestError.serviceUnavailable("every connection is busy").response.serialized(close: true)
                _ = answer.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
                close(fd)
                continue
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let interest = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
            let connection = HTTPConnection(id: nextID, fd: fd, nowMs: now, interest: interest)
            nextID += 1
            do {
                try epoll.add(fd, token: connection.id, events: interest)
            } catch {
                warn("cannot watch a new connection: \(error)", nowMs: now)
                close(fd)
                continue
            }
            connections[connection.id] = connection
            statistics.withLock {
                $0.accepted += 1
                $0.open = connections.count
            }
        }
    }

    /// Closes the connection that matters least to make room: the longest idle, else the one
    /// that has been sending its request longest (a slow client before a phone). False when
    /// every connection has a request with the handler or an answer on its way.
    private func evictOne(nowMs: Int64) -> Bool {
        var idle: HTTPConnection?
        var partial: (HTTPConnection, Int64)?
        for connection in connections.values {
            switch connection.phase {
            // Ties (the same millisecond) go to the older connection: ids grow with each accept.
            case .awaiting:
                if idle == nil || (connection.lastActivityMs, connection.id) < (idle!.lastActivityMs, idle!.id) { idle = connection }
            case .head(let since), .body(_, let since):
                if partial == nil || (since, connection.id) < (partial!.1, partial!.0.id) { partial = (connection, since) }
            case .lingering:
                // Already answered and closing: the cheapest of all to let go.
                idle = connection
            case .handling, .writing:
                break
            }
            if let chosen = idle, case .lingering = chosen.phase { break }
        }
        guard let victim = idle ?? partial?.0 else { return false }
        closeConnection(victim)
        statistics.withLock { $0.evicted += 1 }
        warn("\(limits.maxConnections) connections open: closed the longest idle one to let a new one in", nowMs: nowMs)
        return true
    }

    private func pauseAccepting(nowMs: Int64) {
        guard listening, acceptPausedUntilMs == nil else { return }
        epoll.remove(listenFD)
        acceptPausedUntilMs = nowMs + Self.acceptPauseMs
    }

    private func stopListening() {
        guard listening else { return }
        listening = false
        if acceptPausedUntilMs == nil { epoll.remove(listenFD) }
        acceptPausedUntilMs = nil
        close(listenFD)
    }

    /// Stops accepting and closes what has no request with the handler; the rest close once answered.
    private func beginStop() {
        stopping = true
        stopListening()
        for connection in Array(connections.values) {
            switch connection.phase {
            case .handling, .writing: break
            default: closeConnection(connection)
            }
        }
    }

    // MARK: - Reading

    private func service(_ connection: HTTPConnection, events: UInt32) {
        if events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
            // Reset or gone both ways: nobody is left to answer.
            closeConnection(connection)
            return
        }
        if events & EPOLLOUT.rawValue != 0 { flush(connection) }
        guard !connection.isClosed, events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue) != 0 else { return }
        if case .lingering = connection.phase {
            drain(connection)
        } else if connection.isReading {
            read(connection)
        }
    }

    private func read(_ connection: HTTPConnection) {
        let now = WallClock.monotonicMs()
        // One request's head and body at most: anything longer is over a limit before it is whole.
        let capacity = limits.maxHeadBytes + limits.maxBodyBytes + 8
        for _ in 0..<4 {
            let room = min(capacity - connection.input.count, scratch.count)
            guard room > 0 else { break }
            let n = scratch.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, room, 0) }
            if n > 0 {
                connection.input.append(contentsOf: scratch[0..<n])
                connection.lastActivityMs = now
                if n < room { break }
                continue
            }
            if n == 0 {
                connection.peerClosed = true
                break
            }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { break }
            closeConnection(connection)
            return
        }
        advance(connection, nowMs: now)
        if !connection.isClosed, connection.peerClosed, connection.isReading {
            // The client went before its request was whole (or between requests): nobody to answer.
            closeConnection(connection)
        }
    }

    /// Parses what `input` holds as far as it goes: a whole request goes to the pool; a bad or
    /// oversized one is answered here.
    private func advance(_ connection: HTTPConnection, nowMs now: Int64) {
        while !connection.isClosed {
            switch connection.phase {
            case .awaiting:
                // Blank lines between pipelined requests are allowed (RFC 9112, 2.2).
                let blank = connection.input.prefix { $0 == 13 || $0 == 10 }.count
                if blank > 0 { connection.input.removeFirst(blank) }
                guard !connection.input.isEmpty else {
                    updateInterest(connection)
                    return
                }
                connection.phase = .head(sinceMs: now)
                connection.scanned = 0
            case .head(let since):
                guard let (end, terminator) = connection.headEnd() else {
                    if connection.requestLineExceeds(limits.maxRequestLineBytes) {
                        fail(connection, .uriTooLong("request line over \(limits.maxRequestLineBytes) bytes"), nowMs: now)
                    } else if connection.input.count > limits.maxHeadBytes {
                        fail(connection, .headersTooLarge("request head over \(limits.maxHeadBytes) bytes"), nowMs: now)
                    } else {
                        updateInterest(connection)
                    }
                    return
                }
                guard end + terminator <= limits.maxHeadBytes else {
                    fail(connection, .headersTooLarge("request head of \(end + terminator) bytes (limit \(limits.maxHeadBytes))"), nowMs: now)
                    return
                }
                var head: HTTPRequestHead
                do {
                    head = try HTTPRequestHead.parse(connection.input[0..<end], limits: limits)
                } catch {
                    fail(connection, error, nowMs: now)
                    return
                }
                connection.input.removeFirst(end + terminator)
                connection.scanned = 0
                if stopping { head.keepAlive = false }
                if head.expectsContinue, head.contentLength > connection.input.count {
                    connection.output += Self.continueBytes
                    flush(connection)
                }
                connection.phase = .body(head, sinceMs: since)
            case .body(let head, _):
                guard connection.input.count >= head.contentLength else {
                    updateInterest(connection)
                    return
                }
                let body = Array(connection.input[0..<head.contentLength])
                connection.input.removeFirst(head.contentLength)
                if connection.input.isEmpty, connection.input.capacity > 16 * 1024 { connection.input = [] }
                connection.phase = .handling(keepAlive: head.keepAlive, http10: head.minorVersion == 0)
                statistics.withLock { $0.handled += 1 }
                pool.submit(HTTPHandlerPool.Job(connection: connection.id, request: HTTPServerRequest(
                    method: head.method, target: head.target, headers: head.headers, body: body)))
                updateInterest(connection)
                return
            case .handling, .writing, .lingering:
                updateInterest(connection)
                return
            }
        }
    }

    /// Answers `error` itself and closes after it: past a bad head, nothing says where the next request starts.
    private func fail(_ connection: HTTPConnection, _ error: HTTPRequestError, nowMs: Int64) {
        statistics.withLock { $0.answeredByListener[error.status, default: 0] += 1 }
        if error.status != 408 { warn("answered \(error)", nowMs: nowMs) }
        connection.input = []
        connection.output += error.response.serialized(close: true)
        connection.phase = .writing(close: true, sinceMs: nowMs)
        flush(connection)
    }

    /// Reads and discards what a closing connection still sends, until it closes or the linger ends.
    private func drain(_ connection: HTTPConnection) {
        guard case .lingering(let until, var discarded) = connection.phase else { return }
        while true {
            let n = scratch.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                discarded += n
                if discarded > Self.lingerBytes { break }
                continue
            }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                connection.phase = .lingering(untilMs: until, discarded: discarded)
                return
            }
            break
        }
        closeConnection(connection)
    }

    // MARK: - Writing

    private func deliverAnswers() {
        let answers = inbox.withLock { inbox -> [(UInt64, HTTPServerResponse)] in
            defer { inbox = [] }
            return inbox
        }
        guard !answers.isEmpty else { return }
        let now = WallClock.monotonicMs()
        for (id, response) in answers {
            // A connection reset while its handler ran is gone, and its answer with it.
            guard let connection = connections[id], case .handling(let keepAlive, let http10) = connection.phase else { continue }
            let close = !keepAlive || stopping
            connection.output += response.serialized(close: close, http10KeepAlive: http10 && !close)
            connection.phase = .writing(close: close, sinceMs: now)
            flush(connection)
        }
    }

    private func flush(_ connection: HTTPConnection) {
        while connection.outputOffset < connection.output.count {
            let offset = connection.outputOffset
            let n = connection.output.withUnsafeBytes { send(connection.fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n > 0 {
                connection.outputOffset += n
                continue
            }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                updateInterest(connection)
                return
            }
            closeConnection(connection)
            return
        }
        connection.output.removeAll(keepingCapacity: connection.output.capacity <= 16 * 1024)
        connection.outputOffset = 0
        guard case .writing(let close, _) = connection.phase else {
            updateInterest(connection)
            return
        }
        let now = WallClock.monotonicMs()
        if close || connection.peerClosed {
            if stopping || connection.peerClosed {
                closeConnection(connection)
                return
            }
            // Shut for writing, then drain: closing with unread input would reset the answer away.
            shutdown(connection.fd, Int32(SHUT_WR))
            connection.input = []
            connection.phase = .lingering(untilMs: now + Self.lingerMs, discarded: 0)
            updateInterest(connection)
            return
        }
        connection.phase = .awaiting
        connection.lastActivityMs = now
        // A pipelined request may already be waiting in `input`.
        advance(connection, nowMs: now)
    }

    /// Watches what the phase needs: input while a request is read (or a closing one drained),
    /// writability while an answer is unsent.
    private func updateInterest(_ connection: HTTPConnection) {
        guard !connection.isClosed else { return }
        var wanted: UInt32 = 0
        switch connection.phase {
        case .awaiting, .head, .body, .lingering: wanted = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
        case .handling, .writing: wanted = 0
        }
        if connection.outputOffset < connection.output.count { wanted |= EPOLLOUT.rawValue }
        guard wanted != connection.interest else { return }
        do {
            try epoll.modify(connection.fd, token: connection.id, events: wanted)
            connection.interest = wanted
        } catch {
            closeConnection(connection)
        }
    }

    // MARK: - Deadlines

    private func sweep(nowMs now: Int64) {
        if let paused = acceptPausedUntilMs, now >= paused, listening {
            acceptPausedUntilMs = nil
            do {
                try epoll.add(listenFD, token: Self.listenToken, events: EPOLLIN.rawValue)
            } catch {
                acceptPausedUntilMs = now + Self.acceptPauseMs
            }
        }
        var idleClosed = 0
        for connection in Array(connections.values) {
            switch connection.phase {
            case .awaiting:
                if now - connection.lastActivityMs >= idleTimeoutMs {
                    closeConnection(connection)
                    idleClosed += 1
                }
            case .head(let since), .body(_, let since):
                if now - since >= requestTimeoutMs {
                    fail(connection, .requestTimeout("the request was not whole within \(limits.requestTimeout)"), nowMs: now)
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
        if idleClosed > 0 { statistics.withLock { $0.idleClosed += idleClosed } }
    }

    private func closeConnection(_ connection: HTTPConnection) {
        guard !connection.isClosed, connections.removeValue(forKey: connection.id) != nil else { return }
        connection.isClosed = true
        epoll.remove(connection.fd)
        close(connection.fd)
        connection.input = []
        connection.output = []
        statistics.withLock { $0.open = connections.count }
    }

    private func warn(_ message: String, nowMs: Int64) {
        guard let logger, warnings.allow(nowMs: nowMs) else { return }
        logger.warning("\(what): \(message)")
    }
}

import CLinux
import GeoRelayCore
import Glibc

/// The exchange on one connection: reading and parsing a request, handing it on, writing
/// the answer, and the listener's own answers to what it will not hand on.
extension HTTPServerLoop {
    func service(_ connection: HTTPConnection, events: UInt32) {
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

    func read(_ connection: HTTPConnection) {
        let now = monotonicMs()
        // One request's head and body at most: anything longer is over a limit before it is whole.
        let capacity = limits.maxHeadBytes + limits.maxBodyBytes + 8
        for _ in 0..<4 {
            let room = min(capacity - connection.input.count, scratch.count)
            guard room > 0 else { break }
            let received = scratch.withUnsafeMutableBytes { raw in
                Result { () throws(SystemError) in
                    try connection.socket.read(into: UnsafeMutableRawBufferPointer(rebasing: raw[..<room]))
                }
            }
            guard case .success(let result) = received else {
                closeConnection(connection)
                return
            }
            guard case .processed(let n) = result else { break }
            if n > 0 {
                connection.input.append(contentsOf: scratch[0..<n])
                connection.lastActivityMs = now
                if n < room { break }
                continue
            }
            connection.peerClosed = true
            break
        }
        advance(connection, nowMs: now)
        if !connection.isClosed, connection.peerClosed, connection.isReading {
            // The client went before its request was whole (or between requests): nobody to answer.
            closeConnection(connection)
        }
    }

    /// Parses what `input` holds as far as it goes: a whole request goes to the pool; a bad or
    /// oversized one is answered here.
    func advance(_ connection: HTTPConnection, nowMs now: Int64) {
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
                        fail(
                            connection, .uriTooLong("request line over \(limits.maxRequestLineBytes) bytes"), nowMs: now
                        )
                    } else if connection.input.count > limits.maxHeadBytes {
                        fail(connection, .headersTooLarge("request head over \(limits.maxHeadBytes) bytes"), nowMs: now)
                    } else {
                        updateInterest(connection)
                    }
                    return
                }
                guard end + terminator <= limits.maxHeadBytes else {
                    fail(
                        connection,
                        .headersTooLarge("request head of \(end + terminator) bytes (limit \(limits.maxHeadBytes))"),
                        nowMs: now)
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
                pool.submit(
                    HTTPHandlerPool.Job(
                        connection: connection.id,
                        request: HTTPServerRequest(
                            method: head.method, target: head.target, headers: head.headers, body: body,
                            clientAddress: connection.peer, localAddress: connection.local)))
                updateInterest(connection)
                return
            case .handling, .writing, .lingering:
                updateInterest(connection)
                return
            }
        }
    }

    /// Answers `error` itself and closes after it: past a bad head, nothing says where the next request starts.
    func fail(_ connection: HTTPConnection, _ error: HTTPRequestError, nowMs: Int64) {
        let count = statistics.withLock { statistics in
            statistics.answeredByListener[error.status, default: 0] += 1
            return statistics.answeredByListener[error.status]!
        }
        warn("\(error.status)", "answered \(error) (\(count) so far)", nowMs: nowMs)
        connection.input = []
        connection.output += error.response.serialized(close: true)
        connection.phase = .writing(close: true, sinceMs: nowMs)
        flush(connection)
    }

    /// Reads and discards what a closing connection still sends, until it closes or the linger ends.
    func drain(_ connection: HTTPConnection) {
        guard case .lingering(let until, var discarded) = connection.phase else { return }
        while true {
            let received = scratch.withUnsafeMutableBytes { raw in
                Result { () throws(SystemError) in try connection.socket.read(into: raw) }
            }
            guard case .success(let result) = received else { break }
            guard case .processed(let n) = result else {
                connection.phase = .lingering(untilMs: until, discarded: discarded)
                return
            }
            if n > 0 {
                discarded += n
                if discarded > Self.lingerBytes { break }
                continue
            }
            break
        }
        closeConnection(connection)
    }

    // MARK: - Writing

    func deliverAnswers() {
        let answers = inbox.withLock { inbox -> [(UInt64, HTTPServerResponse)] in
            defer { inbox = [] }
            return inbox
        }
        guard !answers.isEmpty else { return }
        let now = monotonicMs()
        for (id, response) in answers {
            // A connection reset while its handler ran is gone, and its answer with it.
            guard let connection = connections[id], case .handling(let keepAlive, let http10) = connection.phase else {
                continue
            }
            let close = !keepAlive || stopping
            connection.output += response.serialized(close: close, http10KeepAlive: http10 && !close)
            connection.phase = .writing(close: close, sinceMs: now)
            flush(connection)
        }
    }

    func flush(_ connection: HTTPConnection) {
        while connection.outputOffset < connection.output.count {
            let offset = connection.outputOffset
            let sent = connection.output.withUnsafeBytes { raw in
                Result { () throws(SystemError) in
                    try connection.socket.send(UnsafeRawBufferPointer(rebasing: raw[offset...]))
                }
            }
            guard case .success(let result) = sent else {
                closeConnection(connection)
                return
            }
            guard case .processed(let n) = result else {
                updateInterest(connection)
                return
            }
            // A zero-byte send of a non-empty buffer: nothing more will go out.
            guard n > 0 else {
                closeConnection(connection)
                return
            }
            connection.outputOffset += n
        }
        connection.output.removeAll(keepingCapacity: connection.output.capacity <= 16 * 1024)
        connection.outputOffset = 0
        guard case .writing(let close, _) = connection.phase else {
            updateInterest(connection)
            return
        }
        let now = monotonicMs()
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
    func updateInterest(_ connection: HTTPConnection) {
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
}

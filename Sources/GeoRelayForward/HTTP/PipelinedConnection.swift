import CCurl
import GeoRelayCore

/// One kept-alive HTTP/1.1 connection that carries requests back to back and reads their answers
/// in the order they went (RFC 9112 §9.3.2): several batches on the wire per round trip, still in
/// the order the server takes them. Parallel connections would fill the link as well, but a server
/// may then take a device's later batch before its earlier one.
///
/// Blocking, for one thread (`QueueConfined`): `submit` queues a request and writes what the socket
/// takes; `next` writes the rest and reads until the oldest request's answer is complete.
///
/// When the server ends the connection with requests unanswered (`Connection: close`, a keep-alive
/// limit, an idle connection it dropped), those go again on a new connection; a server that ends a
/// connection after its first answer with requests in flight then gets one request at a time
/// (`pipelines` false), as a browser stops pipelining to a server that broke a pipeline. A request
/// that loses its connection twice without an answer fails: it may be what the server cannot take.
package final class PipelinedConnection {
    private struct Queued {
        var bytes: [UInt8]
        /// Lost with a connection once already.
        var retried = false
    }

    private let url: String
    private let tls: Configuration.TLSSettings
    private let connectTimeoutSeconds: Double
    private let timeout: Duration
    private let meter: WireMeter?
    /// What the request timeout and the answers' arrival times are kept on.
    private let clock: any RelayClock
    /// A connection the link's return check opened, taken when one is needed (`SpareConnection`).
    private let spare: SpareConnection?
    private var connection: CurlConnection?
    private var parser = HTTP1ResponseParser()
    /// Requests not yet answered, oldest first; the first `onWire` are written (or being written)
    /// on the current connection.
    private var unanswered: [Queued] = []
    private var onWire = 0
    private var output: [UInt8] = []
    private var written = 0
    private var receivedAtLastAnswer = 0
    private var answeredOnConnection = 0
    /// The connection was opened for the requests now outstanding (not an idle one reused): only
    /// such a connection's end says how the server treats a pipeline; a reused one may simply
    /// have been closed while idle.
    private var openedForBurst = false
    /// False once a server ended a connection with requests in flight: one at a time from then on.
    package private(set) var pipelines = true

    /// - Parameters:
    ///   - timeoutSeconds: the longest the oldest request may go without any byte moving.
    package init(
        url: String, tls: Configuration.TLSSettings, connectTimeoutSeconds: Double, timeoutSeconds: Double,
        meter: WireMeter?, spare: SpareConnection? = nil, clock: any RelayClock = SystemClock()
    ) {
        self.clock = clock
        self.spare = spare
        self.url = url
        self.tls = tls
        self.connectTimeoutSeconds = connectTimeoutSeconds
        // A timeout outside 1 s…1 day (or not a number) is held to it; 30 s where it cannot be read.
        self.timeout = .milliseconds(
            CheckedNumbers.milliseconds(seconds: timeoutSeconds.isFinite ? max(1, min(timeoutSeconds, 86_400)) : 30)
                ?? 30_000)
        self.meter = meter
    }

    /// Requests sent or queued and not answered.
    package var outstanding: Int { unanswered.count }

    /// Queues a request (its head and body, framed by `HTTP1Request`) and writes what the socket takes.
    package func submit(_ request: [UInt8]) {
        if unanswered.isEmpty { openedForBurst = false }
        unanswered.append(Queued(bytes: request))
        guard let connection else { return }
        fillOutput()
        do throws(CurlError) {
            try flush(connection)
        } catch {
            // `next` finds the broken connection and decides.
        }
    }

    /// Drops every request not answered and the connection (the route moved, or the caller gave up
    /// on what is in flight).
    package func reset() {
        unanswered.removeAll()
        close()
        spare?.drop()
    }

    /// The answer to the oldest request: its response, with the request's bytes in `wireBytes`,
    /// or why there is none. After a failure nothing is outstanding: the rest went with the connection.
    /// - Parameter abort: checked every half second; set, the wait ends as a failure.
    package func next(abort: AbortFlag? = nil) -> Result<HTTPResponse, CurlError> {
        precondition(!unanswered.isEmpty, "PipelinedConnection.next with nothing outstanding")
        while true {
            do throws(CurlError) {
                let connection = try connected()
                if let answer = try answer(on: connection, abort: abort) { return .success(answer) }
                // The connection ended before the oldest request's answer began.
                close()
                if unanswered[0].retried {
                    throw CurlError(
                        CURLE_GOT_NOTHING, message: "the server closed the connection twice without answering")
                }
                // Only the oldest was first on the wire; the others rode behind it.
                unanswered[0].retried = true
            } catch {
                reset()
                return .failure(error)
            }
        }
    }

    private func connected() throws(CurlError) -> CurlConnection {
        if let connection { return connection }
        let fresh: CurlConnection
        if let kept = spare?.take(now: clock.now()) {
            fresh = kept
        } else {
            fresh = try CurlConnection(
                url: url, tls: tls, connectTimeoutSeconds: connectTimeoutSeconds, meter: meter, clock: clock)
            try fresh.connect()
        }
        connection = fresh
        openedForBurst = true
        receivedAtLastAnswer = 0
        return fresh
    }

    /// Reads until the oldest request's answer is complete; nil when the connection ended before
    /// any of it arrived (the request may go again).
    private func answer(on connection: CurlConnection, abort: AbortFlag?) throws(CurlError) -> HTTPResponse? {
        do {
            return try read(on: connection, abort: abort)
        } catch
            where !openedForBurst && !error.isTimeout && error.code != CURLE_ABORTED_BY_CALLBACK
            && parser.bufferedBytes == 0 && connection.bytesReceived == receivedAtLastAnswer
        {
            // A reused connection the server had closed while idle answers the first write with a
            // reset: the request goes again on a new one, as libcurl retries it.
            return nil
        }
    }

    private func read(on connection: CurlConnection, abort: AbortFlag?) throws(CurlError) -> HTTPResponse? {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 1)
        defer { buffer.deallocate() }
        var lastProgress = clock.now()
        /// When bytes last came in after this call waited for them (not bytes already there).
        var arrived: RelayInstant?
        var hasWaited = false
        while true {
            fillOutput()
            let sentBefore = connection.bytesSent
            try flush(connection)
            if connection.bytesSent != sentBefore { lastProgress = clock.now() }
            // Drain what has arrived (over TLS curl may hold bytes the socket no longer shows).
            var closed = false
            while true {
                let count = try connection.receive(into: buffer)
                guard let count else { break }
                if count == 0 {
                    closed = true
                    break
                }
                lastProgress = clock.now()
                if hasWaited { arrived = lastProgress }
                parser.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            }
            let parsed: HTTP1Response?
            do throws(HTTP1ParseError) {
                parsed = closed ? try parser.finish() : try parser.next()
            } catch {
                throw CurlError(CURLE_WEIRD_SERVER_REPLY, message: "\(error)")
            }
            if let parsed {
                var response = answered(parsed, on: connection)
                response.arrivedAt = arrived
                return response
            }
            if closed {
                // Part of an answer, then the end: the request did arrive; do not send it again.
                if parser.bufferedBytes > 0 || connection.bytesReceived > receivedAtLastAnswer {
                    throw CurlError(CURLE_PARTIAL_FILE, message: "the connection closed inside an answer")
                }
                if openedForBurst, answeredOnConnection <= 1, onWire > 1 { pipelines = false }
                return nil
            }
            if let abort, abort.isSet { throw CurlError(CURLE_ABORTED_BY_CALLBACK, message: "abandoned") }
            let waited = clock.now() - lastProgress
            if waited >= timeout {
                throw CurlError(CURLE_OPERATION_TIMEDOUT, message: "no answer in \(timeout.components.seconds) s")
            }
            _ = try connection.wait(
                readable: true, writable: written < output.count, timeout: min(.milliseconds(500), timeout - waited))
            hasWaited = true
        }
    }

    /// Takes the oldest request's answer off the queue; the connection goes after an answer that ends it.
    private func answered(_ parsed: HTTP1Response, on connection: CurlConnection) -> HTTPResponse {
        let request = unanswered.removeFirst()
        onWire -= 1
        answeredOnConnection += 1
        receivedAtLastAnswer = connection.bytesReceived
        var response = parsed.response
        response.wireBytes += request.bytes.count
        if !parsed.keepAlive {
            // Requests written behind an answer that ends the connection were not taken: they go
            // again on the next connection. A server that ends every connection after its first
            // answer gets one request at a time; a keep-alive limit (nginx's 1,000) only a new connection.
            if onWire > 0, openedForBurst, answeredOnConnection <= 1 { pipelines = false }
            close()
        }
        return response
    }

    /// Puts requests not yet written on this connection into the output: all of them while
    /// pipelining, else the oldest alone.
    private func fillOutput() {
        let allowed = pipelines ? unanswered.count : min(1, unanswered.count)
        while onWire < allowed {
            output.append(contentsOf: unanswered[onWire].bytes)
            onWire += 1
        }
    }

    private func flush(_ connection: CurlConnection) throws(CurlError) {
        while written < output.count {
            let taken = try connection.send(output, from: written)
            if taken == 0 { return }
            written += taken
        }
        output.removeAll(keepingCapacity: true)
        written = 0
    }

    private func close() {
        connection = nil
        parser = HTTP1ResponseParser()
        output.removeAll(keepingCapacity: true)
        written = 0
        onWire = 0
        answeredOnConnection = 0
    }
}

@available(*, unavailable)
extension PipelinedConnection: Sendable {}

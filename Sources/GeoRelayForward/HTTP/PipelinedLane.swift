import GeoRelayCore

/// One kept-alive HTTP/1.1 connection's protocol state under a round (`OsmAndRound`,
/// `PushRound`): requests framed into `output` back to back, written as the socket takes them, and
/// answered in the order they went (RFC 9112 §9.3.2). The connection itself is the driver's
/// (`RoundDriver`); `connected` mirrors it. What a request is, and what its answer settles, is the
/// round's.
///
/// Several requests per round trip, still in the order the server takes them: parallel
/// connections would fill the link as well, but a server may then take a device's later position
/// before its earlier one.
struct PipelinedLane<Request> {
    var connected = false
    var parser = HTTP1ResponseParser()
    var output: [UInt8] = []
    var sentBytes = 0
    /// Written (or queued in `output`) and not yet answered, oldest first.
    var inFlight: [Request] = []
    /// When bytes last moved either way, for the request timeout.
    var lastProgress = RelayInstant.origin
    var answeredOnConnection = 0

    var hasOutput: Bool { sentBytes < output.count }
    var isBusy: Bool { !inFlight.isEmpty || hasOutput }

    /// At a round's start: nothing in flight, and no connection unless the driver kept it.
    mutating func beginRound(connected kept: Bool) {
        inFlight.removeAll()
        if !kept { close() }
    }

    mutating func opened(at now: RelayInstant) {
        connected = true
        lastProgress = now
    }

    mutating func wrote(_ count: Int, at now: RelayInstant) {
        sentBytes += count
        lastProgress = now
    }

    /// Starts a new output once the socket has taken all of the last; false while some is unsent.
    mutating func startOutput() -> Bool {
        guard !hasOutput else { return false }
        output.removeAll(keepingCapacity: true)
        sentBytes = 0
        return true
    }

    mutating func received(_ bytes: UnsafeRawBufferPointer, at now: RelayInstant) {
        lastProgress = now
        parser.append(bytes)
    }

    /// The next complete answer with the request it answers, oldest first; nil until one is whole.
    /// Anything that cannot be an answer (bytes that do not parse, an answer to no request) is a
    /// fault: it is never an acknowledgement.
    mutating func nextAnswer(at now: RelayInstant) throws(PipelineFault) -> (request: Request, response: HTTP1Response)?
    {
        guard connected else { return nil }
        let parsed: HTTP1Response?
        do throws(HTTP1ParseError) {
            parsed = try parser.next()
        } catch {
            throw PipelineFault(reason: "a response that does not parse: \(error)")
        }
        guard let parsed else { return nil }
        guard !inFlight.isEmpty else { throw PipelineFault(reason: "an answer to no request") }
        return taken(parsed, at: now)
    }

    /// After the server closed the connection: an answer its end completed (one without a length).
    mutating func answerAtClose(at now: RelayInstant) -> (request: Request, response: HTTP1Response)? {
        guard connected, !inFlight.isEmpty, let parsed = try? parser.finish() else { return nil }
        return taken(parsed, at: now)
    }

    private mutating func taken(_ parsed: HTTP1Response, at now: RelayInstant) -> (Request, HTTP1Response) {
        answeredOnConnection += 1
        lastProgress = now
        return (inFlight.removeFirst(), parsed)
    }

    /// Owes an answer and has been silent for `timeout`.
    func timedOut(at now: RelayInstant, after timeout: Duration) -> Bool {
        !inFlight.isEmpty && now >= lastProgress + timeout
    }

    /// The connection is gone: what is framed and unsent goes with it (the requests in flight are
    /// the round's to take: `inFlight`).
    mutating func close() {
        connected = false
        parser = HTTP1ResponseParser()
        output.removeAll(keepingCapacity: true)
        sentBytes = 0
        answeredOnConnection = 0
    }
}

/// Why a pipelined connection is of no more use. Outside `PipelinedLane` because Swift 6.0.3 (the
/// arm64 package's compiler) crashes on typed throws of a type nested in a generic one.
struct PipelineFault: Error {
    let reason: String
}

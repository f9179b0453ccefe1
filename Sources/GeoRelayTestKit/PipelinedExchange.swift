import GeoRelayForward

/// How a `PipelinedExchange` ended.
package enum PipelineEnd: Sendable, Equatable {
    /// The expected number of responses arrived; the connection is still open.
    case open
    /// The peer closed the connection (cleanly, at a response boundary).
    case closed
    /// A connection error (reset, TLS), with curl's code.
    case failed(code: UInt32)
    /// The server's bytes were not valid HTTP, or the connection closed inside a response.
    case parseError(HTTP1ParseError)
    /// The deadline passed first.
    case timedOut
}

/// A blocking client loop over one `CurlConnection` for tests: sends a buffer of pipelined
/// requests while reading responses, until the expected count arrived, the connection ended,
/// or the deadline passed. The delivery engine has its own loop; this one keeps the tests' short.
package struct PipelinedExchange {
    /// The responses, in the order they arrived.
    package var responses: [HTTP1Response] = []
    /// Why the exchange stopped.
    package var end = PipelineEnd.timedOut
    /// Bytes of `requests` the connection took.
    package var bytesSent = 0

    /// - Parameters:
    ///   - requests: the requests, framed back to back (`HTTP1Request.append`).
    ///   - count: how many responses to wait for.
    ///   - timeout: the bound on the whole exchange.
    package init(
        on connection: CurlConnection, sending requests: [UInt8], expecting count: Int, timeout: Duration = .seconds(10)
    ) {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var parser = HTTP1ResponseParser()
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        do {
            while true {
                if bytesSent < requests.count {
                    // The same array, unmoved, from the first byte not taken: TLS's retry rule.
                    bytesSent += try requests.withUnsafeBytes { all in
                        try connection.send(UnsafeRawBufferPointer(rebasing: all[bytesSent...]))
                    }
                }
                // Drain what curl has (over TLS it may hold decrypted bytes the socket does not show).
                var closed = false
                while let n = try chunk.withUnsafeMutableBytes({ try connection.receive(into: $0) }) {
                    if n == 0 {
                        closed = true
                        break
                    }
                    chunk.withUnsafeBytes { parser.append(UnsafeRawBufferPointer(rebasing: $0[..<n])) }
                }
                while let response = try parser.next() { responses.append(response) }
                if closed {
                    while let response = try parser.finish() { responses.append(response) }
                    end = .closed
                    return
                }
                if responses.count >= count {
                    end = .open
                    return
                }
                let remaining = clock.now.duration(to: deadline)
                guard remaining > .zero else { return }
                _ = try connection.wait(readable: true, writable: bytesSent < requests.count, timeout: remaining)
            }
        } catch let error as CurlError {
            end = .failed(code: error.code.rawValue)
        } catch let error as HTTP1ParseError {
            end = .parseError(error)
        } catch {
            preconditionFailure("unexpected error \(error)")
        }
    }
}

import Foundation
import GeoRelayCore

/// An HTTP/1.1 server on the simulated network, answering with the same handlers as
/// `HTTPTestServer` (so the fake Traccar and gateway answer on it without a socket), in the
/// styles met in the wild: keep-alive, a close after every answer or after a few (nginx's
/// `keepalive_requests`), a slow answer, a request dropped with its connection.
///
/// Pipelined requests are answered one by one, in order, each after the server's processing time
/// (drawn from `processing` with the seed), as Traccar's Netty HTTP codec does.
package final class SimulatedHTTPServer: SimulatedService, @unchecked Sendable {
    private let handler: HTTPTestServer.Handler
    private let responsesPerConnection: Int?
    private let processing: ClosedRange<Duration>
    private let lock = NSLock()
    private var random: SeededRandom
    private var accepted = 0
    private var deepest = 0

    /// - Parameters:
    ///   - closesAfterEachResponse: every answer says `Connection: close` and the connection ends
    ///     after it; requests pipelined behind it are read and dropped, never answered.
    ///   - responsesPerConnection: the same after this many answers.
    ///   - processing: how long the server takes over each request, drawn evenly.
    ///   - seed: where the draws come from.
    package init(
        closesAfterEachResponse: Bool = false, responsesPerConnection: Int? = nil,
        processing: ClosedRange<Duration> = .microseconds(200) ... .milliseconds(2), seed: UInt64 = 1,
        handler: @escaping HTTPTestServer.Handler
    ) {
        self.handler = handler
        self.responsesPerConnection = closesAfterEachResponse ? 1 : responsesPerConnection
        self.processing = processing
        random = SeededRandom(seed: seed)
    }

    /// Connections that reached the server.
    package var connectionsAccepted: Int { lock.withLock { accepted } }
    /// The most requests that were at the server on one connection at once, answered or not:
    /// above 1 only when a client pipelines.
    package var deepestPipeline: Int { lock.withLock { deepest } }

    package func accept(connection number: Int) -> any SimulatedSession {
        lock.withLock { accepted += 1 }
        return Session(server: self, number: number)
    }

    fileprivate func processingTime() -> Duration {
        lock.withLock {
            let span = processing.upperBound - processing.lowerBound
            let ns = SimulatedClock.nanoseconds(span)
            let drawn = ns == 0 ? 0 : random.next() % (ns == .max ? .max : ns + 1)
            return processing.lowerBound + .nanoseconds(Int64(clamping: drawn))
        }
    }

    fileprivate func observe(depth: Int) {
        lock.withLock { deepest = max(deepest, depth) }
    }

    private final class Session: SimulatedSession {
        let server: SimulatedHTTPServer
        let number: Int
        var buffer: [UInt8] = []
        var answered = 0
        var closed = false
        /// When each answer given leaves the server: requests not yet answered are its depth.
        var answersLeave: [RelayInstant] = []

        init(server: SimulatedHTTPServer, number: Int) {
            self.server = server
            self.number = number
        }

        var holdsUnread: Bool { !buffer.isEmpty }

        func received(_ bytes: [UInt8], at now: RelayInstant) -> [SimulatedReply] {
            guard !closed else { return [] }
            buffer += bytes
            var replies: [SimulatedReply] = []
            while let taken = HTTPTestWire.takeRequest(from: &buffer, connection: number) {
                answersLeave.removeAll { $0 <= now }
                guard case .request(let request) = taken, let response = server.handler(request) else {
                    // Closed without an answer: with requests behind it unread, a reset.
                    closed = true
                    return replies + [.close(lingering: false)]
                }
                server.observe(depth: answersLeave.count + 1)
                answered += 1
                let last =
                    server.responsesPerConnection.map { answered >= $0 }
                    ?? (request.header("Connection")?.lowercased() == "close")
                // Answered in turn: its processing starts once the answer before it has left.
                let processing = server.processingTime()
                answersLeave.append(max(now, answersLeave.last ?? now) + processing)
                replies.append(.send(HTTPTestWire.frame(response, closing: last), after: processing))
                if last {
                    closed = true
                    buffer.removeAll()
                    replies.append(.close(lingering: true))
                    break
                }
            }
            return replies
        }
    }
}

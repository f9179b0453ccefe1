import CCurl
import GeoRelayCore
import Synchronization

/// How push batches reach the gateway: pipelined on one kept-alive connection, or, for a URL the
/// framing cannot carry, one at a time through libcurl. Both take requests in order and give their
/// answers in the same order, so the forwarder's window does not care which.
///
/// Used from one task at a time (the forwarder's loop).
final class PushTransport: Sendable {
    private enum Carrier: Sendable {
        case pipelined(QueueConfined<PipelinedConnection>, HTTP1Target)
        case single(HTTPWorker, Queue)
    }

    /// Requests waiting for `next`, for the one-at-a-time carrier.
    final class Queue: Sendable {
        let requests = Mutex<[HTTPRequest]>([])
    }

    private let carrier: Carrier
    /// A request that could not be framed: its `next` fails, and what was submitted with it is dropped.
    private let unframed = Mutex<CurlError?>(nil)

    /// - Parameter spare: a connection the link's return check opened, for the next batch.
    init(
        settings: Configuration.DestinationSettings, meter: WireMeter, logger: Logger, spare: SpareConnection? = nil,
        clock: any RelayClock
    ) throws {
        let target: HTTP1Target?
        do {
            target = try HTTP1Target(url: settings.url)
        } catch {
            logger.warning("one batch at a time: the URL cannot be pipelined (\(error))")
            target = nil
        }
        if let target {
            let connection = PipelinedConnection(
                url: settings.url, tls: settings.tls, connectTimeoutSeconds: settings.connectTimeoutSeconds,
                timeoutSeconds: settings.requestTimeoutSeconds, meter: meter, spare: spare, clock: clock)
            carrier = .pipelined(QueueConfined(label: "georelay.push.\(settings.name)", connection), target)
        } else {
            carrier = .single(
                try HTTPWorker(label: "georelay.push.\(settings.name)", tls: settings.tls, meter: meter), Queue())
        }
    }

    /// Whether more than one batch may be on the wire: false for libcurl's one at a time, and
    /// once the server has ended a connection after its first answer with batches in flight.
    var pipelines: Bool {
        get async {
            guard case .pipelined(let connection, _) = carrier else { return false }
            return await connection.run { $0.pipelines }
        }
    }

    /// Queues `request` behind those sent; over a pipelined connection it goes on the wire now.
    func submit(_ request: HTTPRequest) async {
        switch carrier {
        case .pipelined(let connection, let target):
            var framed: [UInt8] = []
            do {
                try HTTP1Request(method: request.method, target: target, headers: request.headers).append(
                    body: request.body, to: &framed)
            } catch {
                // A header value that cannot go on the wire (a token with a line break): the batch
                // and everything behind it fail, as a connection that broke would.
                unframed.withLock {
                    $0 = CurlError(CURLE_BAD_FUNCTION_ARGUMENT, message: "a request header cannot be sent: \(error)")
                }
                await connection.run { $0.reset() }
                return
            }
            if unframed.withLock({ $0 }) != nil { return }
            let bytes = framed
            await connection.run { $0.submit(bytes) }
        case .single(_, let queue):
            queue.requests.withLock { $0.append(request) }
        }
    }

    /// The answer to the oldest request submitted. After a failure nothing is outstanding.
    func next(unlessAbandoned abandon: AbortFlag) async -> Result<HTTPResponse, CurlError> {
        switch carrier {
        case .pipelined(let connection, _):
            if let failure = unframed.withLock({ state -> CurlError? in
                defer { state = nil }
                return state
            }) {
                await connection.run { $0.reset() }
                return .failure(failure)
            }
            return await connection.run { $0.next(abort: abandon) }
        case .single(let worker, let queue):
            let request = queue.requests.withLock { $0.removeFirst() }
            let result = await worker.perform(request, unlessAbandoned: abandon)
            if case .failure = result { queue.requests.withLock { $0.removeAll() } }
            return result
        }
    }

    /// Drops what is in flight and the connection: requests submitted are neither sent nor answered.
    func reset() async {
        switch carrier {
        case .pipelined(let connection, _):
            unframed.withLock { $0 = nil }
            await connection.run { $0.reset() }
        case .single(let worker, let queue):
            queue.requests.withLock { $0.removeAll() }
            await worker.forgetConnections()
        }
    }
}

import Dispatch
import GeoRelayCore
import GeoRelayHTTP
import GeoRelaySpool
import Glibc
import Synchronization

/// The OsmAnd HTTP port for phones: the requests a Traccar server takes on its
/// OsmAnd port (GET or POST with query or form parameters, or the JSON body of
/// current Traccar Client apps), answered 200 only once the position is durable
/// and 400 for a request it cannot use. A phone pointed here instead of at the
/// server gets the relay's buffering for free.
///
/// Requests from a georelay (its User-Agent) are refused with 508, so a
/// destination pointed back at this listener cannot loop.
package final class PhoneListener: Sendable {
    private let http: HTTPListener
    package var port: Int { http.port }

    /// Listens on `HOST:PORT` (e.g. `0.0.0.0:5055`).
    /// - Parameter rules: the socket ingest's (`IngestServer.rules`): the same decoder, clocks and
    ///   multi-source routing, so a phone listed as one of a device's sources feeds that device
    ///   as a collector would.
    /// - Parameter requestsPerSecond: what one client address may send on average (ten times that at once).
    /// - Parameter clock: the relay's, which the rates and the connections' timeouts are measured on.
    package init(
        listen: String, spool: Spool, rules: IngestSession.Rules, requestsPerSecond: Int = 20, logger: Logger,
        clock: any RelayClock = SystemClock()
    ) throws(IngestStartError) {
        let session = IngestSession(rules: rules)
        let refusals = RefusalLog(requestsPerSecond: requestsPerSecond, clock: clock)
        do {
            http = try HTTPListener(listen: listen, what: "ingest.http.listen", logger: logger, clock: clock) {
                request in
                Self.answer(request, session: session, spool: spool, refusals: refusals, logger: logger)
            }
        } catch {
            throw IngestStartError(description: error.description)
        }
        logger.info("phones: OsmAnd HTTP on \(listen)")
        switch rules.phones?.allowed {
        case .listed(let ids)? where ids.isEmpty:
            logger.warning(
                "phones: no device id may post here: list them in ingest.http.devices (or the phones as sources of a devices entry)"
            )
        case .any?:
            logger.warning(
                "phones: ingest.http.devices is \"*\": any host that reaches \(listen) can post positions for any device id"
            )
        default: break
        }
    }

    /// Serves until `stop()` or cancellation (`HTTPListener.run`).
    package func run() async { await http.run() }

    package func stop() { http.stop() }

    /// Stores the request's position; the status to answer. A phone request needs nothing of
    /// a connection's state, so every request goes through the one session.
    private static func answer(
        _ request: HTTPListener.Request, session: IngestSession, spool: Spool, refusals: RefusalLog,
        logger: Logger
    ) -> HTTPListener.Response {
        if request.header("user-agent")?.hasPrefix("georelay") == true {
            logger.warning("refused a request from a georelay: a destination points back at this listener")
            return HTTPListener.Response(status: 508, reason: "Loop Detected")
        }
        guard refusals.admit(request.clientAddress) else {
            spool.add(counters: ["ingest.http.throttled": 1])
            return HTTPListener.Response(status: 429, reason: "Too Many Requests")
        }
        let phone = IngestSession.PhoneRequest(
            isJSON: request.header("content-type")?.hasPrefix("application/json") == true,
            target: request.target, body: request.body)
        switch session.receive(phone: phone) {
        case .reject(let error, _):
            spool.add(counters: ["ingest.rejected.\(error.code)": 1])
            // The code only, and at most a few a minute: a request's contents (its values, a
            // phone's device id) are never logged, and a flood cannot fill the diagnostic log.
            if refusals.allow() {
                logger.info("phone request refused (\(error.code))")
            }
            return HTTPListener.Response(status: 400, reason: "Bad Request")
        case .store(let positions, _):
            let done = DispatchSemaphore(value: 0)
            let result = Mutex<AppendResult?>(nil)
            spool.append(positions) { results in
                result.withLock { $0 = results.first }
                done.signal()
            }
            done.wait()
            let stored = result.withLock { $0 }
            if case .failed(let error)? = stored { spool.add(counters: ["ingest.rejected.\(error.code)": 1]) }
            return stored?.seq != nil
                ? HTTPListener.Response(status: 200, reason: "OK")
                : HTTPListener.Response(status: 503, reason: "Service Unavailable")
        }
    }

    /// At most ten refusals logged a minute, and each client's request rate, shared by every
    /// request's thread.
    private final class RefusalLog: Sendable {
        private let limiter = Mutex(RateLimiter(perWindow: 10, windowMs: 60_000))
        private let clients: Mutex<ClientBuckets>
        private let clock: any RelayClock
        init(requestsPerSecond: Int, clock: any RelayClock) {
            clients = Mutex(ClientBuckets(perSecond: requestsPerSecond, burst: requestsPerSecond * 10))
            self.clock = clock
        }
        func allow() -> Bool { limiter.withLock { $0.allow(nowMs: nowMs()) } }
        func admit(_ client: String) -> Bool { clients.withLock { $0.allow(client, nowMs: nowMs()) } }
        private func nowMs() -> Int64 { clock.monotonicMs() }
    }
}

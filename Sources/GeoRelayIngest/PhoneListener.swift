import Foundation
import GeoRelayCore
import GeoRelayHTTP
import GeoRelaySpool
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
    /// - Parameter sources: the multi-source routing of the socket's ingest, so a phone listed
    ///   as one of a device's sources feeds that device as a collector would.
    package init(listen: String, spool: Spool, decoder: LineDecoder, sources: SourceRouter? = nil, logger: Logger) throws(IngestStartError) {
        do {
            http = try HTTPListener(listen: listen, what: "ingest.http.listen", logger: logger) { request in
                Self.answer(request, spool: spool, decoder: decoder, sources: sources, logger: logger)
            }
        } catch {
            throw IngestStartError(description: error.description)
        }
        logger.info("phones: OsmAnd HTTP on \(listen)")
    }

    package func stop() { http.stop() }

    /// Stores the request's position; the status to answer.
    private static func answer(_ request: HTTPListener.Request, spool: Spool, decoder: LineDecoder, sources: SourceRouter?,
                               logger: Logger) -> HTTPListener.Response {
        if request.header("user-agent")?.hasPrefix("georelay") == true {
            logger.warning("refused a request from a georelay: a destination points back at this listener")
            return HTTPListener.Response(status: 508, reason: "Loop Detected")
        }
        let position: Position
        do throws(IngestError) {
            if request.header("content-type")?.hasPrefix("application/json") == true {
                position = try TraccarClientJSON.decode(String(decoding: request.body, as: UTF8.self))
            } else {
                // As Traccar: the URL's parameters, or the body's when the URL has none.
                var query = request.target.firstIndex(of: "?").map { String(request.target[request.target.index(after: $0)...]) } ?? ""
                if query.isEmpty { query = String(decoding: request.body, as: UTF8.self) }
                position = try OsmAndQuery.decode(query, defaultDevice: nil)
            }
            try decoder.validate(position, nowMs: WallClock.latestMs())
        } catch {
            spool.add(counters: ["ingest.rejected.\(error.code)": 1])
            logger.info("phone request refused (\(error.code)): \(error.message)")
            return HTTPListener.Response(status: 400, reason: "Bad Request")
        }
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<AppendResult?>(nil)
        // The active receiver's position also goes in under its device, in the same commit.
        let routed = sources?.route(position).map { [$0] } ?? []
        spool.append([position] + routed) { results in
            result.withLock { $0 = results.first }
            done.signal()
        }
        done.wait()
        return result.withLock { $0?.seq } != nil
            ? HTTPListener.Response(status: 200, reason: "OK")
            : HTTPListener.Response(status: 503, reason: "Service Unavailable")
    }
}

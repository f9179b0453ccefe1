import GeoRelayCore
import GeoRelayHTTP
import GeoRelaySpool
import Glibc
import Synchronization

/// The crew's status page (`ui.listen`): `/`, one self-contained document, and
/// `/status.json`, exactly `georelay status --json`'s object, which the page polls.
///
/// Read-only by construction: only GET and HEAD are answered (anything else 405), and no path
/// does anything but read the spool. Nothing secret is in either: the JSON is status's, whose
/// destination URLs are redacted and which carries no key or token.
package enum StatusPage {
    /// The configuration the page reads with, replaced at each reload (SIGHUP), so a destination
    /// added or removed shows without a restart; the listener itself stays as it started.
    package final class LiveConfiguration: Sendable {
        private let current: Mutex<Configuration>
        package init(_ configuration: Configuration) { current = Mutex(configuration) }
        package var configuration: Configuration { current.withLock { $0 } }
        package func update(_ configuration: Configuration) { current.withLock { $0 = configuration } }
    }

    /// Serves the page on `listen`; with `metrics` (the same address as `metrics.listen`) the
    /// one listener answers `/metrics` and `/healthz` too. Each answer is of `clock`'s now (the relay's).
    package static func serve(
        listen: String, configuration live: LiveConfiguration, health: HealthMonitor?, metrics: Bool,
        faults: FaultInjection = .none, clock: any RelayClock = SystemClock()
    ) throws(HTTPListenError) -> HTTPListener {
        let tracks = TrackCache()
        return try HTTPListener(
            listen: listen, what: metrics ? "ui.listen and metrics.listen" : "ui.listen", clock: clock
        ) { request in
            let configuration = live.configuration
            guard HostCheck.allows(request, names: configuration.uiHosts) else {
                return HTTPListener.Response(
                    status: 421, reason: "Misdirected Request", contentType: "text/plain",
                    body: Array("this relay's page answers to its own addresses and host name, and to ui.hosts\n".utf8))
            }
            guard request.method == "GET" || request.method == "HEAD" else {
                return HTTPListener.Response(
                    status: 405, reason: "Method Not Allowed", contentType: "text/plain",
                    body: Array("read-only: only GET and HEAD are answered here\n".utf8))
            }
            let response =
                respond(
                    to: request, configuration: configuration, health: health, tracks: tracks, faults: faults,
                    clock: clock)
                ?? (metrics
                    ? Metrics.respond(
                        to: request, configuration: configuration, health: health, faults: faults, clock: clock)
                    : nil)
                ?? HTTPListener.Response(status: 404, reason: "Not Found")
            guard request.method == "HEAD" else { return response }
            // The listener frames what it is given: a HEAD answer is the GET's head without its body.
            return HTTPListener.Response(
                status: response.status, reason: response.reason, contentType: response.contentType)
        }
    }

    /// The page's own paths; nil for any other.
    package static func respond(
        to request: HTTPListener.Request, configuration: Configuration, health: HealthMonitor?,
        tracks: TrackCache = TrackCache(), faults: FaultInjection = .none, clock: any RelayClock = SystemClock()
    ) -> HTTPListener.Response? {
        switch request.path {
        case "/", "/index.html":
            return HTTPListener.Response(
                status: 200, reason: "OK", contentType: "text/html; charset=utf-8", body: Array(document.utf8))
        case "/status.json":
            do {
                let report = try StatusReport.load(
                    configuration: configuration, clock: clock, monitor: health, sketches: .cached(tracks),
                    faults: faults)
                return HTTPListener.Response(
                    status: 200, reason: "OK", contentType: "application/json",
                    body: Array((report.json.jsonText + "\n").utf8))
            } catch {
                return HTTPListener.Response(
                    status: 503, reason: "Service Unavailable", contentType: "text/plain",
                    body: Array("cannot read the spool \(configuration.spool.path): \(error)\n".utf8))
            }
        default:
            return nil
        }
    }
}

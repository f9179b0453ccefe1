import GeoRelayCore

/// An empty request to a destination's own URL, and how to read its answer.
///
/// Used twice, for the same reason: to tell the server from the link.
/// - As the **probe** while backing off after a network failure: only the
///   absence of an answer says the link is down. A TCP connect proves little
///   (a black-holing middlebox or a captive portal accepts it), so the probe is
///   an HTTP request, and its answer says how to go on (`Answer`).
/// - As the **canary** before quarantining a Traccar position that got no
///   answer twice: Traccar closes the connection on a payload it cannot
///   decode, but so does a dying link. Traccar answers a request that names no
///   device with `400`; that answer proves the server is there and listening,
///   so the payload really is at fault. No answer means the link is.
///
/// It carries no position and no credentials: a GET without parameters costs
/// a few hundred bytes and puts nothing on the server. Traccar's Teltonika port
/// answers no HTTP; it has its own probe (`TeltonikaProbe`), read as the same `Answer`.
package enum ServerCheck {
    /// What a probe's answer says.
    package enum Answer: Equatable, Sendable {
        /// Nothing answered (refused, reset, timed out, TLS failure): the link is down.
        case nothing
        /// Something answered over HTTP, but nothing only the destination's server would say:
        /// an HTML error page (nginx's 405, Python's 501), a redirect, a 5xx. There is a path;
        /// whether it reaches the server only a real payload can tell.
        case path
        /// An answer only the destination's server gives: deliver at full speed.
        case server
    }

    /// - Parameter timeout: the whole exchange's; a probe that may wait on board a terminal that
    ///   holds connections is given longer.
    static func request(url: String, connectTimeoutSeconds: Double, timeout: Duration) -> HTTPRequest {
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) * 1e-18
        return HTTPRequest(
            method: "GET", url: url, timeoutSeconds: seconds, connectTimeoutSeconds: connectTimeoutSeconds)
    }

    /// Reads a probe of the destination's own URL, or of `probe.url` when `ownURL` is false
    /// (which must answer 2xx, not a page, to count as the server).
    package static func answer(_ result: Result<HTTPResponse, CurlError>, ownURL: Bool = true) -> Answer {
        guard case .success(let response) = result else { return .nothing }
        if ownURL { return provesServer(result) ? .server : .path }
        return (200..<300).contains(response.status) && !TraccarProtocol.looksLikeHTML(response) ? .server : .path
    }

    /// Whether the answer came from the destination's server: any non-HTML
    /// answer that is not a redirect (portals redirect) or a 5xx (a server that
    /// cannot take positions now). Traccar's OsmAnd port answers `400`; a push
    /// gateway's endpoint `404`/`405` to a GET.
    static func provesServer(_ result: Result<HTTPResponse, CurlError>) -> Bool {
        guard case .success(let response) = result else { return false }
        let status = response.status
        return ((200..<300).contains(status) || (400..<500).contains(status))
            && !TraccarProtocol.looksLikeHTML(response)
    }
}

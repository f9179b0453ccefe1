import GeoRelayCore

/// An empty request to a destination's own URL, and how to read its answer.
///
/// Used twice, for the same reason: to tell the server from the link.
/// - As the **probe** while backing off: a TCP connect succeeds through a
///   middlebox that black-holes or closes everything, and a captive portal
///   accepts any connection, so only an HTTP answer from something that is not
///   a portal says payloads would get through.
/// - As the **canary** before quarantining a Traccar position that got no
///   answer twice: Traccar closes the connection on a payload it cannot
///   decode, but so does a dying link. Traccar answers a request that names no
///   device with `400`; that answer proves the server is there and listening,
///   so the payload really is at fault. No answer means the link is.
///
/// It carries no position and no credentials: a GET without parameters costs
/// a few hundred bytes and puts nothing on the server.
enum ServerCheck {
    static func request(url: String, connectTimeoutSeconds: Double) -> HTTPRequest {
        HTTPRequest(method: "GET", url: url, timeoutSeconds: connectTimeoutSeconds * 2, connectTimeoutSeconds: connectTimeoutSeconds)
    }

    /// Whether the answer came from the destination's server: any non-HTML
    /// answer that is not a redirect (portals redirect) or a 5xx (a server that
    /// cannot take positions now). Traccar's OsmAnd port answers `400`; a push
    /// gateway's endpoint `404`/`405` to a GET.
    static func provesServer(_ result: Result<HTTPResponse, CurlError>) -> Bool {
        guard case .success(let response) = result else { return false }
        let status = response.status
        return ((200..<300).contains(status) || (400..<500).contains(status)) && !TraccarProtocol.looksLikeHTML(response)
    }
}

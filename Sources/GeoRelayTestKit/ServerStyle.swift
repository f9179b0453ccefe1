/// How servers in the wild answer a GET they do not expect, which is what the
/// relay's probe is: Traccar's OsmAnd port, gateways behind nginx, Python's
/// `http.server`, a captive portal. The fakes answer their probe in the style
/// a test sets, so a test can check that none of them can hold delivery.
package enum ServerStyle: String, CaseIterable, Sendable, CustomStringConvertible {
    /// Traccar: a request naming no device is a bad request, with no body.
    case plain400
    /// A JSON API: no such route.
    case json404
    /// A JSON API: no GET on this route.
    case json405
    /// nginx's default error page for a method the location does not allow.
    case nginx405
    /// Python's `http.server`, which has no `do_GET`: its HTML error page.
    case python501
    /// A captive portal: everything is redirected to its login page.
    case portalRedirect

    package var description: String { rawValue }

    /// The answer to the probe in this style.
    package var probeAnswer: HTTPTestResponse {
        switch self {
        case .plain400:
            return HTTPTestResponse(status: 400)
        case .json404:
            return HTTPTestResponse(
                status: 404, headers: [("Content-Type", "application/json")],
                body: Array(#"{"error":"not found"}"#.utf8))
        case .json405:
            return HTTPTestResponse(
                status: 405, headers: [("Content-Type", "application/json"), ("Allow", "POST")],
                body: Array(#"{"error":"method not allowed"}"#.utf8))
        case .nginx405:
            return HTTPTestResponse(
                status: 405, headers: [("Content-Type", "text/html"), ("Server", "nginx")],
                body: Array(
                    """
                    <html>\r
                    <head><title>405 Not Allowed</title></head>\r
                    <body>\r
                    <center><h1>405 Not Allowed</h1></center>\r
                    <hr><center>nginx</center>\r
                    </body>\r
                    </html>\r

                    """.utf8))
        case .python501:
            return HTTPTestResponse(
                status: 501, headers: [("Content-Type", "text/html;charset=utf-8"), ("Connection", "close")],
                body: Array(
                    """
                    <!DOCTYPE HTML>
                    <html lang="en">
                        <head>
                            <meta charset="utf-8">
                            <title>Error response</title>
                        </head>
                        <body>
                            <h1>Error response</h1>
                            <p>Error code: 501</p>
                            <p>Message: Unsupported method ('GET').</p>
                            <p>Error code explanation: 501 - Server does not support this operation.</p>
                        </body>
                    </html>

                    """.utf8))
        case .portalRedirect:
            return HTTPTestResponse(
                status: 302,
                headers: [("Location", "http://portal.invalid/login?continue=1"), ("Content-Type", "text/html")],
                body: Array(
                    "<html><body><a href=\"http://portal.invalid/login\">Log in to the hotspot</a></body></html>".utf8))
        }
    }
}

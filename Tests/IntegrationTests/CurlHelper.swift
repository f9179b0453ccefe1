import GeoRelayForward

/// GET through the relay's own libcurl wrapper.
struct GeoRelayForwardCurl {
    let easy: CurlEasy
    init() throws { easy = try CurlEasy() }

    func get(_ url: String) throws -> String {
        let response = try easy.perform(HTTPRequest(method: "GET", url: url))
        return String(decoding: response.body, as: UTF8.self)
    }

    /// The status code with the body, for answers other than 200.
    func fetch(_ url: String) throws -> (status: Int, body: String) {
        let response = try easy.perform(HTTPRequest(method: "GET", url: url))
        return (response.status, String(decoding: response.body, as: UTF8.self))
    }
}

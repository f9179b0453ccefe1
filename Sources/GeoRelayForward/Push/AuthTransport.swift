import CCurl

/// How the push destination's token and login requests reach the auth server: libcurl's
/// `HTTPWorker` in the daemon, the destination's simulated link in tests (`NetworkChecks.exchange`),
/// so the whole of push, login included, runs on simulated time.
package protocol AuthTransport: Sendable {
    func perform(_ request: HTTPRequest) async -> Result<HTTPResponse, CurlError>
    /// The next request opens a new connection (the route moved).
    func forgetConnections() async
}

extension HTTPWorker: AuthTransport {}

/// The simulated way (or any `RoundNetwork`): each request on a connection of its own, run by
/// `check`, which puts the blocking exchange on a thread of its own.
package struct NetworkAuthTransport: AuthTransport {
    private let exchange: @Sendable (HTTPRequest) async -> Result<HTTPResponse, CurlError>

    /// - Parameter exchange: one request and its answer (`NetworkChecks.exchange` on a thread).
    package init(exchange: @escaping @Sendable (HTTPRequest) async -> Result<HTTPResponse, CurlError>) {
        self.exchange = exchange
    }

    package func perform(_ request: HTTPRequest) async -> Result<HTTPResponse, CurlError> {
        await exchange(request)
    }

    package func forgetConnections() async {}

    /// What a request that never ran (its task cancelled) failed with.
    package static let abandoned = CurlError(CURLE_ABORTED_BY_CALLBACK, message: "the request was abandoned")
}

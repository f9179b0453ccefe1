import GeoRelayCore
import Glibc

/// Why the destination has no usable token.
package enum PushAuthError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The auth server could not be reached or failed: back off and try again.
    case unavailable(String, retryAfter: Double?, transport: Bool)
    /// The auth server refused (wrong key, unknown driver): `auth-failed` until something changes.
    case rejected(String)

    package var description: String {
        switch self {
        case .unavailable(let reason, _, _): "auth server unavailable: \(reason)"
        case .rejected(let reason): reason
        }
    }
}

/// Gets and keeps the push destination's bearer token.
///
/// `login` mode (SDK-managed): a token from `{authBaseUrl}api/auth/token` with
/// the API key, then the driver's login at `{registrationBaseUrl}api/users/login`;
/// pushes only after both. The token is refreshed every `tokenRefreshSeconds`
/// (24 h), or before `expiresIn` runs out if that is sooner, and at once after
/// a 401, on a clock that does not jump with the wall clock (`RelayClock.steadyWall`).
/// `token` mode (app-managed): the caller's token, re-read each time so
/// another program can renew it; one that drew a 401 is not used again.
/// Neither the token nor the API key ever goes into a message.
package actor PushAuthenticator {
    private let settings: Configuration.DestinationSettings
    private let push: PushSettings
    private let worker: any AuthTransport
    private let store: TokenStore?
    private let now: @Sendable () -> Int64
    /// The machine's monotonic clock and boot, which a stored token's age is kept on; nil when
    /// `now` is not this clock's (a test's own wall time): ages then come from the stored times.
    private let clock: (any RelayClock)?
    private let logger: Logger
    private var current: PushToken?
    private var storeModified: Int64?
    /// In token mode, the caller's token that the server refused.
    private var refused: String?

    package init(
        settings: Configuration.DestinationSettings, store: TokenStore?, worker: any AuthTransport, logger: Logger,
        now: @escaping @Sendable () -> Int64, clock: (any RelayClock)?
    ) {
        self.settings = settings
        self.clock = clock
        self.push = settings.push ?? PushSettings()
        self.worker = worker
        self.store = store
        self.now = now
        self.logger = logger
    }

    /// A token to push with, getting or refreshing one first if needed.
    package func token() async throws(PushAuthError) -> String {
        switch push.authMode {
        case .token:
            let value: String
            do {
                value = try (push.token ?? Secret(.literal(""), path: "auth.token")).reveal()
            } catch {
                throw .rejected("CALLER_ACCESS_TOKEN_REQUIRED: \(error)")
            }
            if value == refused { throw .rejected("the caller's token was refused (HTTP 401); waiting for a new one") }
            return value
        case .login:
            reloadStoreIfChanged()
            if let token = current, token.loggedIn, !refreshDue(token) { return token.value }
            return try await obtain()
        }
    }

    /// Forgets a token the push endpoint answered 401 to.
    /// The next login opens a new connection (the route moved).
    func forgetConnections() async {
        await worker.forgetConnections()
    }

    package func invalidate(_ token: String) {
        switch push.authMode {
        case .token:
            refused = token
        case .login:
            if current?.value == token { current = nil }
        }
    }

    /// Gets a new token now (login mode; `georelay token refresh`).
    package func refresh() async throws(PushAuthError) -> String {
        guard push.authMode == .login else {
            throw .rejected("token refresh applies to login mode only; in token mode the caller provides the token")
        }
        return try await obtain()
    }

    /// When the current token will be refreshed (status and tests).
    package func refreshDueMs() -> Int64? {
        current.map { refreshAt($0) }
    }

    private func refreshAt(_ token: PushToken) -> Int64 {
        var due = token.obtainedMs.saturatingPlus(
            CheckedNumbers.milliseconds(seconds: push.tokenRefreshSeconds) ?? 3_600_000)
        if let expires = token.expiresMs {
            // Ahead of expiry by a tenth of the lifetime, at most five minutes.
            let margin = min(300_000, max(0, expires.saturatingMinus(token.obtainedMs)) / 10)
            due = min(due, expires.saturatingMinus(margin))
        }
        return due
    }

    private func refreshDue(_ token: PushToken) -> Bool { now() >= refreshAt(token) }

    private func reloadStoreIfChanged() {
        guard let store, let modified = store.modified(), modified != storeModified else { return }
        storeModified = modified
        if let loaded = store.load(), case let token = clock.map({ loaded.rebased(now: now(), clock: $0) }) ?? loaded,
            token.obtainedMs >= (current?.obtainedMs ?? .min)
        {
            current = token
        }
    }

    private func url(_ base: String?, _ path: String) -> String {
        let base = base ?? ""
        if base.hasSuffix("/"), path.hasPrefix("/") { return base + path.dropFirst() }
        if !base.hasSuffix("/"), !path.hasPrefix("/") { return base + "/" + path }
        return base + path
    }

    private func apiKey() throws(PushAuthError) -> String {
        do {
            return try (push.apiKey ?? Secret(.literal(""), path: "apiKey")).reveal()
        } catch {
            throw .rejected("CONFIGURATION_ERROR: \(error)")
        }
    }

    /// Token, then login; saved for restarts and for other processes.
    private func obtain() async throws(PushAuthError) -> String {
        let key = try apiKey()
        let response = try await post(
            [("clientId", .string(push.clientID ?? "")), ("tenant", .string(push.tenant))],
            to: url(push.authBaseURL, push.tokenPath), credential: ("x-api-key", key), what: "token request")
        guard case .object(let object)? = try? JSONParser.parse(String(decoding: response.body, as: UTF8.self)),
            case .string(let value)? = object["accessToken"] ?? object["access_token"], !value.isEmpty
        else {
            throw .rejected("token request: HTTP \(response.status) without an accessToken in the answer")
        }
        let obtained = now()
        let expiresIn: Double? =
            switch object["expiresIn"] ?? object["expires_in"] {
            case .number(let seconds)?: seconds
            case .string(let text)?: Double(text)
            default: nil
            }
        // Checked before any conversion: out of 0…10 years (1e400, "nan") it means nothing usable:
        // no expiry, refreshed on the configured schedule.
        let expires = expiresIn.flatMap { CheckedNumbers.milliseconds(seconds: $0) }.map { obtained.saturatingPlus($0) }
        var token = PushToken(value: value, obtainedMs: obtained, expiresMs: expires, loggedIn: false)
        if let clock {
            token.obtainedOn = clock.bootID().map { PushToken.BootTime(boot: $0, monotonicMs: clock.monotonicMs()) }
        }
        _ = try await post(
            [("username", .string(push.username)), ("tenant", .string(push.tenant))],
            to: url(push.registrationBaseURL, push.loginPath), credential: ("Authorization", "Bearer \(value)"),
            what: "login of \(push.username)")
        token.loggedIn = true
        current = token
        if let store {
            do {
                try store.save(token)
                storeModified = store.modified()
            } catch {
                logger.warning("cannot save the token for restarts: \(error)")
            }
        }
        logger.info("authenticated as \(push.username) for tenant \(push.tenant)")
        return value
    }

    /// One auth-server request, a JSON object posted with `credential` as a header: 2xx or a typed
    /// reason (never the secrets).
    private func post(
        _ fields: [(key: String, value: JSONValue)], to url: String, credential: (String, String), what: String
    ) async throws(PushAuthError) -> HTTPResponse {
        let request = HTTPRequest(
            method: "POST", url: url, headers: [credential, ("Content-Type", "application/json")],
            body: Array(JSONValue.object(JSONObject(fields)).jsonText.utf8),
            timeoutSeconds: settings.requestTimeoutSeconds, connectTimeoutSeconds: settings.connectTimeoutSeconds)
        switch await worker.perform(request) {
        case .failure(let error):
            throw .unavailable("\(what): \(error.message)", retryAfter: nil, transport: true)
        case .success(let response):
            switch response.status {
            case 200..<300:
                if TraccarProtocol.looksLikeHTML(response) {
                    throw .unavailable(
                        "\(what): an HTML page instead of the auth server (captive portal?)", retryAfter: nil,
                        transport: true)
                }
                return response
            case 429, 503:
                throw .unavailable(
                    "\(what): HTTP \(response.status)", retryAfter: TraccarProtocol.retryAfter(response),
                    transport: false)
            case 500..<600, 408:
                throw .unavailable("\(what): HTTP \(response.status)", retryAfter: nil, transport: false)
            default:
                throw .rejected("\(what) refused: HTTP \(response.status)")
            }
        }
    }
}

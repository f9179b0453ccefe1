/// A tracking-push destination (`"type": "push"`): a tenant gateway that takes
/// batches of points with a bearer token, as the tracking SDK speaks to it.
package struct PushSettings: Sendable, Equatable {
    /// How the relay gets its bearer token.
    package enum AuthMode: String, Sendable, CaseIterable {
        /// SDK-managed: get a token with the API key, log the driver in, refresh every 24 h.
        case login
        /// App-managed: another program provides the token (`auth.token`).
        case token
    }

    package enum Compression: String, Sendable, CaseIterable {
        case zstd, gzip, none

        /// The next weaker encoding, after a 415. (`Compression.none` spelled out:
        /// a bare `.none` in an optional context would be `nil`.)
        package var weaker: Compression? {
            switch self {
            case .zstd: Compression.gzip
            case .gzip: Compression.none
            case .none: nil
            }
        }
    }

    /// TRACKING_BASE_URL: where tokens come from.
    package var authBaseURL: String?
    /// TRACKING_REGISTRATION_BASE_URL, kept with its trailing slash: where the driver logs in.
    package var registrationBaseURL: String?
    /// TRACKING_API_KEY.
    package var apiKey: Secret?
    /// TRACKING_CLIENT_ID.
    package var clientID: String?
    /// TRACKING_TENANT_NAME.
    package var tenant = ""
    /// The driver.
    package var username = ""
    package var authMode = AuthMode.login
    /// The caller's token in `token` mode.
    package var token: Secret?
    /// The tenant gateway for duty events (`https://api-gw.example.com/gateway/<tenant>`).
    package var eventsBaseURL: String?

    package var tokenPath = "api/auth/token"
    package var loginPath = "api/users/login"
    package var eventsPath = "/api/ndms2/events"

    package var batchMaxPositions = 500
    package var batchMaxBytes = 256 * 1024
    package var batchMaxDelaySeconds = 5.0
    /// The most batches of a backlog on the wire at once, pipelined on one connection; fewer when
    /// fewer keep the link busy (`PipelineDepth`). 1: one batch a round trip.
    package var batchInFlight = 8
    package var compression = Compression.zstd
    /// A fixed zstd level, or nil for `"auto"`: level 7 (where bytes per position
    /// level off) on a fast link, 19 (about 10% fewer bytes for 20x the CPU) when
    /// the link is slow enough that the bytes saved take longer to send than the CPU costs.
    package var zstdLevel: Int?
    /// Refresh the token at least this often (the SDK's 24 hours).
    package var tokenRefreshSeconds = 86_400.0

    package init() {}
}

extension PushSettings {
    /// Reads the push keys of a destination node; codes are the tracking SDK's.
    static func read(_ node: inout ConfigNode) throws(ConfigError) -> PushSettings {
        var push = PushSettings()
        func required(_ key: String, _ value: String?, at path: String? = nil) throws(ConfigError) -> String {
            guard let value, !value.trimmingWhitespace.isEmpty else {
                throw ConfigError(
                    path: path ?? node.child(key), "CONFIGURATION_ERROR: \(key) is required and may not be blank")
            }
            return value
        }
        push.authBaseURL = try node.optionalString("authBaseUrl")
        push.registrationBaseURL = try node.optionalString("registrationBaseUrl")
        push.apiKey = try node.secret("apiKey")
        push.clientID = try node.optionalString("clientId")
        push.tenant = try node.optionalString("tenant") ?? ""
        let username = try node.optionalString("username")
        guard let username, !username.trimmingWhitespace.isEmpty else {
            throw ConfigError(path: node.child("username"), "USERNAME_REQUIRED: the driver's username is required")
        }
        push.username = username
        push.eventsBaseURL = try node.optionalString("eventsBaseUrl")

        var auth = try node.node("auth")
        push.authMode = try auth.choice("mode", default: push.authMode)
        push.token = try auth.secret("token")
        try auth.finish()

        var paths = try node.node("paths")
        push.tokenPath = try paths.string("token", default: push.tokenPath)
        push.loginPath = try paths.string("login", default: push.loginPath)
        push.eventsPath = try paths.string("events", default: push.eventsPath)
        try paths.finish()

        var batch = try node.node("batch")
        push.batchMaxPositions = try batch.integer(
            "maxPositions", default: push.batchMaxPositions, min: 1, max: 100_000)
        push.batchMaxBytes = try batch.integer("maxBytes", default: push.batchMaxBytes, min: 1024, max: 64 << 20)
        push.batchMaxDelaySeconds = try batch.number(
            "maxDelaySeconds", default: push.batchMaxDelaySeconds, min: 0, max: 86_400)
        push.batchInFlight = try batch.integer("inFlight", default: push.batchInFlight, min: 1, max: 64)
        try batch.finish()
        push.compression = try node.choice("compression", default: push.compression)
        if case .string(let text)? = node.value("zstdLevel") {
            guard text == "auto" else {
                throw ConfigError(
                    path: node.child("zstdLevel"), "expected \"auto\" or a level from 1 to 22, got \"\(text)\"")
            }
        } else if node.contains("zstdLevel") {
            push.zstdLevel = try node.integer("zstdLevel", default: 7, min: 1, max: 22)
        }
        push.tokenRefreshSeconds = try node.number(
            "tokenRefreshSeconds", default: push.tokenRefreshSeconds, min: 60, max: 31_536_000)

        _ = try required("tenant", push.tenant)
        switch push.authMode {
        case .login:
            let base = try required("authBaseUrl", push.authBaseURL)
            try Configuration.DestinationSettings.validateURL(base, at: node.child("authBaseUrl"))
            let registration = try required("registrationBaseUrl", push.registrationBaseURL)
            try Configuration.DestinationSettings.validateURL(registration, at: node.child("registrationBaseUrl"))
            _ = try required("clientId", push.clientID)
            guard let apiKey = push.apiKey else {
                throw ConfigError(
                    path: node.child("apiKey"), "CONFIGURATION_ERROR: apiKey is required and may not be blank")
            }
            if case .literal(let value) = apiKey.source {
                _ = try required("apiKey", value)
            }
        case .token:
            guard let token = push.token else {
                throw ConfigError(
                    path: auth.child("token"),
                    "CALLER_ACCESS_TOKEN_REQUIRED: token mode needs auth.token (a string, {\"env\": ...} or {\"file\": ...})"
                )
            }
            if case .literal(let value) = token.source, value.trimmingWhitespace.isEmpty {
                throw ConfigError(path: auth.child("token"), "CALLER_ACCESS_TOKEN_REQUIRED: auth.token is blank")
            }
        }
        if let events = push.eventsBaseURL {
            try Configuration.DestinationSettings.validateURL(events, at: node.child("eventsBaseUrl"))
        }
        return push
    }
}

import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import Glibc

/// `georelay duty`, `georelay token refresh`, and `send` to push destinations.
extension Commands {
    /// The push destinations a command applies to: the named one, or all of them.
    ///
    /// A name the configuration does not have as a push destination is a usage error (64),
    /// as for `send` and `replay`; a configuration without any is the command failing (1).
    static func pushDestinations(_ name: String?, in configuration: Configuration, command: String) throws
        -> [Configuration.DestinationSettings]
    {
        let matching = configuration.destinations.filter { $0.kind == .push && (name == nil || $0.name == name) }
        if matching.isEmpty {
            guard let name else { throw RelayError("no push destination in the configuration") }
            throw UsageError(command: command, "--destination '\(name)' is not a push destination of the configuration")
        }
        return matching
    }

    /// - Parameter clock: the command's (`Invocation.clock`): the token's schedule and its age on disk.
    static func authenticator(
        _ settings: Configuration.DestinationSettings, configuration: Configuration, clock: any RelayClock
    ) throws -> PushAuthenticator {
        PushAuthenticator(
            settings: settings, store: TokenStore(spoolPath: configuration.spool.path, destination: settings.name),
            worker: try HTTPWorker(label: "georelay.cli.auth", tls: settings.tls), logger: .disabled,
            now: clock.steadyWall(), clock: clock)
    }

    /// Sends the on-duty or off-duty event with the current token (getting one first in login mode).
    package static func duty(
        on: Bool, destination: String?, configuration: Configuration, clock: any RelayClock
    ) async throws -> [(
        String, String?
    )] {
        var results: [(String, String?)] = []
        for settings in try pushDestinations(destination, in: configuration, command: "duty") {
            let push = settings.push ?? PushSettings()
            guard let base = push.eventsBaseURL else {
                results.append((settings.name, "eventsBaseUrl is not configured"))
                continue
            }
            let auth = try authenticator(settings, configuration: configuration, clock: clock)
            let worker = try HTTPWorker(label: "georelay.cli.events", tls: settings.tls)
            var url =
                base.hasSuffix("/") && push.eventsPath.hasPrefix("/")
                ? base + push.eventsPath.dropFirst() : base + push.eventsPath
            if let key = try? push.apiKey?.reveal() { url += "?api-key=" + OsmAndQuery.percentEncode(key) }
            let body = JSONValue.object(
                JSONObject([("typeCode", .string("DUTY")), ("actionCode", .string(on ? "on_duty" : "off_duty"))])
            ).jsonText
            var failure: String?
            for attempt in 0..<2 {
                let token: String
                do {
                    token = try await auth.token()
                } catch {
                    failure = "\(error)"
                    break
                }
                let response = await worker.perform(
                    HTTPRequest(
                        method: "POST", url: url,
                        headers: [
                            ("Authorization", "Bearer \(token)"), ("X-Tenant", push.tenant),
                            ("Content-Type", "application/json"),
                        ],
                        body: Array(body.utf8), timeoutSeconds: settings.requestTimeoutSeconds,
                        connectTimeoutSeconds: settings.connectTimeoutSeconds))
                switch response {
                case .success(let http) where (200..<300).contains(http.status):
                    failure = nil
                case .success(let http) where http.status == 401 && attempt == 0:
                    await auth.invalidate(token)
                    continue
                case .success(let http):
                    failure = "HTTP \(http.status)"
                case .failure(let error):
                    failure = error.message
                }
                break
            }
            results.append((settings.name, failure))
        }
        return results
    }

    /// Gets a new token now (login mode) and stores it where the running relay picks it up.
    package static func refreshToken(
        destination: String?, configuration: Configuration, clock: any RelayClock
    ) async throws -> [(
        String, String?
    )] {
        var results: [(String, String?)] = []
        for settings in try pushDestinations(destination, in: configuration, command: "token") {
            do {
                _ = try await authenticator(settings, configuration: configuration, clock: clock).refresh()
                results.append((settings.name, nil))
            } catch {
                results.append((settings.name, "\(error)"))
            }
        }
        return results
    }

    /// One position straight to a push destination, as a batch of one.
    static func sendPush(
        _ position: Position, settings: Configuration.DestinationSettings, configuration: Configuration,
        clock: any RelayClock
    ) async -> DeliveryOutcome {
        let push = settings.push ?? PushSettings()
        let wire = PushProtocol(settings: settings)
        do {
            let auth = try authenticator(settings, configuration: configuration, clock: clock)
            let worker = try HTTPWorker(label: "georelay.cli.push", tls: settings.tls)
            let json = wire.encodeBatch([wire.encodePoint(position)])
            var encoding = push.compression
            var retried = false
            while true {
                let token = try await auth.token()
                let body =
                    switch encoding {
                    case .none: json
                    case .gzip: try Gzip.compress(json)
                    case .zstd:
                        try ZstdCompressor().compress(json, level: push.zstdLevel ?? CompressionPlanner.thoroughLevel)
                    }
                switch wire.outcome(
                    of: await worker.perform(wire.request(body: body, encoding: encoding, token: token)))
                {
                case .delivered:
                    return .delivered
                case .unauthorized where !retried:
                    retried = true
                    await auth.invalidate(token)
                case .unsupportedEncoding where encoding.weaker != nil:
                    encoding = encoding.weaker!
                case .unavailable(let reason, let retryAfter, let transport):
                    return .unavailable(reason, retryAfter: retryAfter, transport: transport)
                case let other:
                    return .rejected("\(other)")
                }
            }
        } catch {
            return .unavailable("\(error)", retryAfter: nil, transport: false)
        }
    }
}

/// The commands' entry points: one line per destination, exit status 0 only if every one succeeded.
extension Commands {
    static func duty(_ invocation: Invocation) async throws -> ExitCode {
        let word = invocation.arguments.requiredWord("duty")
        return report(
            "duty \(word)", to: invocation.console,
            try await duty(
                on: word == "on", destination: invocation.arguments.text("--destination"),
                configuration: invocation.configuration, clock: invocation.clock))
    }

    static func refreshToken(_ invocation: Invocation) async throws -> ExitCode {
        report(
            "token refresh", to: invocation.console,
            try await refreshToken(
                destination: invocation.arguments.text("--destination"), configuration: invocation.configuration,
                clock: invocation.clock))
    }

    private static func report(_ what: String, to console: Console, _ results: [(String, String?)]) -> ExitCode {
        var ok = true
        for (destination, failure) in results {
            if let failure {
                ok = false
                console.line("\(destination): \(what) failed: \(failure)")
            } else {
                console.line("\(destination): \(what) done")
            }
        }
        return ok ? .success : .failure
    }
}

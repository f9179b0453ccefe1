/// The configuration as the relay will run it, every default filled in and
/// every secret masked: what `georelay check` prints.
extension Configuration {
    package var effective: JSONValue {
        func number(_ n: Double) -> JSONValue { .number(n) }
        func secret(_ s: Secret?) -> JSONValue { s.map { .string($0.description) } ?? .null }
        func string(_ s: String?) -> JSONValue { s.map { .string($0) } ?? .null }
        let destinations: [JSONValue] = destinations.map { d in
            var members: [(key: String, value: JSONValue)] = [
                ("type", .string(d.kind.rawValue)), ("name", .string(d.name)), ("url", .string(Redaction.url(d.url))),
                ("buffer", .bool(d.buffer)), ("concurrency", number(Double(d.concurrency))),
                ("timeoutSeconds", number(d.requestTimeoutSeconds)),
                ("connectTimeoutSeconds", number(d.connectTimeoutSeconds)),
                ("unknownDeviceRetrySeconds", number(d.parkSeconds)),
                ("order", .string(d.order.rawValue)), ("currentWithinSeconds", number(d.currentWithinSeconds)),
                (
                    "backoff",
                    .object(
                        JSONObject([
                            ("minSeconds", number(d.backoffMinSeconds)), ("maxSeconds", number(d.backoffMaxSeconds)),
                        ]))
                ),
                (
                    "probe",
                    .object(
                        JSONObject([
                            ("url", string(d.probeURL.map(Redaction.url))),
                            ("intervalSeconds", number(d.probeIntervalSeconds)),
                            ("connectSeconds", number(d.probeConnectSeconds)),
                        ]))
                ),
                ("caFile", string(d.tls.caFile)), ("insecure", .bool(d.tls.insecure)),
                (
                    "filter",
                    .object(
                        JSONObject([
                            ("distanceMeters", number(d.filter.distanceMeters)),
                            ("intervalSeconds", number(d.filter.intervalSeconds)),
                            ("angleDegrees", number(d.filter.angleDegrees)),
                            ("stopDetection", .bool(d.filter.stopDetection)),
                            ("stopTimeoutSeconds", number(d.filter.stopTimeoutSeconds)),
                            ("stationaryRadiusMeters", number(d.filter.stationaryRadiusMeters)),
                            ("heartbeatIntervalSeconds", number(d.filter.heartbeatIntervalSeconds)),
                            ("mode", .string(d.filter.mode.rawValue)),
                        ]))
                ),
            ]
            if d.kind == .traccar {
                members.insert(
                    contentsOf: [
                        ("protocol", .string(d.traccarProtocol.rawValue)), ("pipeline", number(Double(d.pipeline))),
                    ], at: 5)
            }
            if let p = d.push {
                members += [
                    ("authBaseUrl", string(p.authBaseURL)), ("registrationBaseUrl", string(p.registrationBaseURL)),
                    ("eventsBaseUrl", string(p.eventsBaseURL)), ("apiKey", secret(p.apiKey)),
                    ("clientId", string(p.clientID)),
                    ("tenant", .string(p.tenant)), ("username", .string(p.username)),
                    (
                        "auth",
                        .object(JSONObject([("mode", .string(p.authMode.rawValue)), ("token", secret(p.token))]))
                    ),
                    (
                        "batch",
                        .object(
                            JSONObject([
                                ("maxPositions", number(Double(p.batchMaxPositions))),
                                ("maxBytes", number(Double(p.batchMaxBytes))),
                                ("maxDelaySeconds", number(p.batchMaxDelaySeconds)),
                                ("inFlight", number(Double(p.batchInFlight))),
                            ]))
                    ),
                    ("compression", .string(p.compression.rawValue)),
                    ("zstdLevel", p.zstdLevel.map { number(Double($0)) } ?? .string("auto")),
                    ("tokenRefreshSeconds", number(p.tokenRefreshSeconds)),
                ]
            }
            return .object(JSONObject(members))
        }
        return .object(
            JSONObject([
                (
                    "spool",
                    .object(
                        JSONObject([
                            ("path", .string(spool.path)), ("retainHours", number(spool.retainHours)),
                            ("maxBytes", number(Double(spool.maxBytes))),
                            ("whenFull", .string(spool.whenFull.rawValue)),
                            ("commitWindowMs", number(Double(spool.commitWindowMs))),
                            ("stateSyncSeconds", number(spool.stateSyncSeconds)),
                        ]))
                ),
                (
                    "ingest",
                    .object(
                        JSONObject([
                            ("socket", .string(ingest.socket)), ("maxLineBytes", number(Double(ingest.maxLineBytes))),
                            ("maxFutureSeconds", number(Double(ingest.maxFutureSeconds))),
                            ("maxConnections", number(Double(ingest.maxConnections))),
                            (
                                "nmea",
                                .object(
                                    JSONObject([("hdopAccuracyMeters", ingest.nmeaAccuracyPerHDOP.map(number) ?? .null)]
                                    ))
                            ),
                            (
                                "http",
                                .object(
                                    JSONObject([
                                        ("listen", string(ingest.httpListen)), ("devices", phoneDevicesJSON),
                                        ("maxRequestsPerSecond", .number(Double(ingest.httpRequestsPerSecond))),
                                    ]))
                            ),
                        ]))
                ),
                (
                    "devices",
                    .array(
                        devices.map { d in
                            .object(
                                JSONObject([
                                    ("id", .string(d.id)), ("sources", .array(d.sources.map { .string($0) })),
                                    ("failoverSeconds", number(d.failoverSeconds)),
                                ]))
                        })
                ),
                ("destinations", .array(destinations)),
                (
                    "uplinks",
                    .array(
                        uplinks.map { u in
                            .object(
                                JSONObject([
                                    ("name", .string(u.name)), ("interface", .string(u.interface)),
                                    ("metered", .bool(u.metered)), ("count", .string(u.count.rawValue)),
                                    (
                                        "budget",
                                        u.budget.map { b in
                                            .object(
                                                JSONObject([
                                                    ("dayBytes", b.dayBytes.map { number(Double($0)) } ?? .null),
                                                    ("monthBytes", b.monthBytes.map { number(Double($0)) } ?? .null),
                                                ]))
                                        } ?? .null
                                    ),
                                ]))
                        })
                ),
                ("metrics", .object(JSONObject([("listen", string(metricsListen))]))),
                (
                    "ui",
                    .object(JSONObject([("listen", string(uiListen)), ("hosts", .array(uiHosts.map { .string($0) }))]))
                ),
            ]))
    }

    /// `ingest.http.devices` as given: `"*"` or the sorted list.
    private var phoneDevicesJSON: JSONValue {
        switch ingest.httpDevices {
        case .any: .string("*")
        case .listed(let ids): .array(ids.sorted().map { .string($0) })
        }
    }
}

extension JSONValue {
    /// Indented JSON for people.
    package func prettyText(indent: String = "") -> String {
        let inner = indent + "  "
        switch self {
        case .array(let items) where !items.isEmpty:
            return "[\n" + items.map { inner + $0.prettyText(indent: inner) }.joined(separator: ",\n") + "\n\(indent)]"
        case .object(let object) where !object.members.isEmpty:
            return "{\n"
                + object.members.map { member in
                    var key = ""
                    JSONValue.writeQuoted(member.key, to: &key)
                    return inner + key + ": " + member.value.prettyText(indent: inner)
                }.joined(separator: ",\n") + "\n\(indent)}"
        default:
            return jsonText
        }
    }
}

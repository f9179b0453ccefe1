import FoundationEssentials
import Glibc

/// Everything the relay reads from `config/georelay.json5`.
///
/// Every key has a default, so `{}` runs a relay that spools in `spool/` and
/// forwards to a Traccar server on this machine's OsmAnd port.
package struct Configuration: Sendable, Equatable {
    package var spool = SpoolSettings()
    package var ingest = IngestSettings()
    package var destinations: [DestinationSettings] = [DestinationSettings()]
    /// Vessels with several GPS units: which sources report for which device, best first.
    package var devices: [DeviceSources] = []
    /// `HOST:PORT` for Prometheus metrics (`/metrics`) and `/healthz`; nil: off.
    package var metricsListen: String?
    /// `HOST:PORT` for the crew's status page (`/`) and its JSON (`/status.json`); nil: off.
    /// The same address as `metricsListen` serves all four paths on one listener.
    package var uiListen: String?
    /// Names the status page answers to besides the box's own addresses and host name (`ui.hosts`).
    package var uiHosts: [String] = []
    /// The box's uplinks by interface (`Configuration+Uplinks.swift`); empty: not tracked.
    package var uplinks: [Uplink] = []
    /// The Iridium SBD modem aboard, the last uplink (`sbd`); nil: none.
    package var sbd: SBDUplinkSettings?

    package init() {}

    /// One device fed by several sources (a primary receiver and its backup).
    package struct DeviceSources: Sendable, Equatable {
        package var id: String
        /// Source device ids, best first.
        package var sources: [String]
        /// A source that has not reported for this long hands over to the next.
        package var failoverSeconds = 10.0
        /// How its receivers are judged for jamming and spoofing (`integrity`, and the device's
        /// `separationMetres`).
        package var integrity = IntegritySettings()

        package init(
            id: String, sources: [String], failoverSeconds: Double = 10.0, integrity: IntegritySettings = .init()
        ) {
            self.id = id
            self.sources = sources
            self.failoverSeconds = failoverSeconds
            self.integrity = integrity
        }
    }

    /// Every source id, which the relay stores but never forwards as itself.
    package var sourceIDs: Set<String> { Set(devices.flatMap(\.sources)) }

    /// The device ids the phone port takes: `ingest.http.devices` and every source of a `devices`
    /// entry (a phone listed there feeds its device), or any with `"*"`.
    package var phoneDevices: PhoneAdmission.Allowed {
        switch ingest.httpDevices {
        case .any: .any
        case .listed(let ids): .listed(ids.union(sourceIDs))
        }
    }

    package struct SpoolSettings: Sendable, Equatable {
        package var path = "spool/georelay.db"
        /// Delivered positions are kept this long for replay and export.
        package var retainHours = 168.0
        package var maxBytes: Int64 = 1 << 30
        package var whenFull = WhenFull.dropOldest
        /// The longest a position waits for its company of collectors before the commit: at a
        /// few positions a second, one fsync for several of them instead of one each (flash wear).
        package var commitWindowMs = 900
        /// How long acknowledgements, counters and log entries may wait in memory before they are
        /// written; a crash can only cost positions sent twice, never one lost.
        package var stateSyncSeconds = 15.0
        package init() {}
    }

    /// What to do when the spool reaches its quota with nothing delivered left to drop.
    package enum WhenFull: String, Sendable, CaseIterable {
        case dropOldest = "drop-oldest"
        case reject
    }

    package struct IngestSettings: Sendable, Equatable {
        package var socket = "spool/georelay.sock"
        package var maxLineBytes = 8192
        package var maxFutureSeconds = 600
        package var maxConnections = 1024
        /// `HOST:PORT` of the OsmAnd HTTP listener for phones; nil: off.
        package var httpListen: String?
        /// The device ids the phone port takes (`ingest.http.devices`: a list, or `"*"` for any);
        /// the sources of `devices` entries are taken too (``Configuration/phoneDevices``).
        package var httpDevices: PhoneAdmission.Allowed = .listed([])
        /// Requests a second one client address may make of the phone port (a burst of ten times that).
        package var httpRequestsPerSecond = 20
        /// Metres of horizontal accuracy per unit of NMEA HDOP (a receiver's UERE); nil: accuracy left out.
        package var nmeaAccuracyPerHDOP: Double?
        /// The shore relay's door for Iridium SBD (`ingest.sbd`).
        package var sbd = SBDShoreSettings()
        package init() {}
    }

    package enum DestinationKind: String, Sendable, CaseIterable {
        /// A Traccar server's OsmAnd port.
        case traccar
        /// A tracking-push tenant gateway.
        case push
    }

    /// How a Traccar destination carries positions.
    package enum TraccarProtocolKind: String, Sendable, CaseIterable {
        /// HTTP to the OsmAnd port (5055): one position per request, pipelined on kept-alive connections.
        case osmand
        /// TCP (or TLS) to the Teltonika port (5027): codec 8 Extended frames of up to 255 records.
        case teltonika
    }

    /// The Teltonika destination's default `concurrency`: a round's worth of devices.
    package static let teltonikaConcurrency = 64

    package struct DestinationSettings: Sendable, Equatable {
        package var name = "traccar"
        package var kind = DestinationKind.traccar
        package var url = "http://127.0.0.1:5055"
        /// `false` makes the destination real-time only: each position is tried once, nothing queues.
        package var buffer = true
        /// How many devices may have a request in flight at once.
        package var concurrency = 4
        /// Traccar: the protocol that carries positions.
        package var traccarProtocol = TraccarProtocolKind.osmand
        /// OsmAnd requests in flight at once on one kept-alive connection (HTTP/1.1 pipelining);
        /// 1 sends one request per round trip, through libcurl, as before pipelining. 128 requests of
        /// about 150 bytes fill a geostationary link's bandwidth-delay product (256 kbit/s × 600 ms ≈ 19 KB).
        /// Teltonika: the most frames on one device's connection ahead of their answers.
        package var pipeline = 128
        package var backoffMinSeconds = 5.0
        /// The backoff ceiling; also how often, at least, a real payload goes while probes get no answer.
        package var backoffMaxSeconds = 300.0
        /// A URL to GET as the probe after a network failure instead of `url` itself; its 2xx (not a page) proves the server.
        package var probeURL: String?
        /// While the link is down, how often to probe it (at most), however long the backoff.
        package var probeIntervalSeconds = 15.0
        /// While the link is down, how often to try a bare TCP connection to the destination
        /// between probes; one that opens brings the probe forward. 0: probes only.
        package var probeConnectSeconds = 2.0
        package var requestTimeoutSeconds = 30.0
        package var connectTimeoutSeconds = 10.0
        /// `requestTimeoutSeconds` for the rounds' clocks: range-checked where the config is read,
        /// and converted without a trap all the same (a setting built in code is not read).
        package var requestTimeout: Duration {
            .milliseconds(CheckedNumbers.milliseconds(seconds: requestTimeoutSeconds, max: 3_600) ?? 30_000)
        }
        /// A probe's own timeout, twice `connectTimeoutSeconds`, converted as `requestTimeout` is.
        package var probeTimeout: Duration {
            .milliseconds(CheckedNumbers.milliseconds(seconds: connectTimeoutSeconds * 2, max: 7_200) ?? 20_000)
        }
        /// Between bare connection attempts while the link is down (at least 0.1 s), converted as
        /// `requestTimeout` is.
        package var probeConnectInterval: Duration {
            .milliseconds(CheckedNumbers.milliseconds(seconds: max(0.1, probeConnectSeconds), max: 3_600) ?? 2_000)
        }
        /// How long a device the server does not know stays parked before one retry.
        package var parkSeconds = 600.0
        /// After an outage, whether the history goes before each device's current position
        /// (`DrainOrder`), and how long the current position may wait for it under `auto`.
        package var order = DrainOrderSetting.auto
        package var currentWithinSeconds = 10.0
        /// Which positions this destination gets (distance 75 m for Traccar, the SDK's 50 m for push).
        package var filter = FilterSettings()
        /// The push destination's own settings, when `kind` is `.push`.
        package var push: PushSettings?
        /// How HTTPS servers are verified (all of this destination's requests: positions, probes, auth).
        package var tls = TLSSettings()
        package init() {}
    }

    /// Which goes first when a device is behind (after an outage, a start-up, a budget freed):
    /// its history, oldest first, or its current position (see `DrainOrder`).
    package enum DrainOrderSetting: String, Sendable, CaseIterable {
        /// History first while the current position can still reach the server within
        /// `currentWithinSeconds`; then the current position, and the rest of the history after it.
        case auto
        /// History first, however long it takes: every event and report as if the link had not dropped.
        case oldestFirst = "oldest-first"
        /// Each device's current position first, then the history (Traccar raises no event for it).
        case currentFirst = "current-first"
    }

    /// Certificate verification for a destination's HTTPS requests: on by default, against the
    /// system's CAs or `caFile`; `insecure` turns it off, loudly.
    package struct TLSSettings: Sendable, Equatable {
        /// A PEM file of the CA(s) that signed the server's certificate (a private CA or a self-signed server).
        package var caFile: String?
        /// No verification at all: anyone on the path can read and alter what is sent. Never the default.
        package var insecure = false
        package init() {}
    }
}

extension Configuration {
    /// Reads a configuration file (JSON5).
    package static func load(path: String) throws(ConfigError) -> Configuration {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigError(path: "", "cannot read config file \(path)")
        }
        do {
            return try parse(String(decoding: data, as: UTF8.self))
        } catch {
            throw ConfigError(path: error.path, error.path.isEmpty ? "\(path): \(error.message)" : error.message)
        }
    }

    /// Parses configuration text (JSON5), validating every key.
    package static func parse(_ text: String) throws(ConfigError) -> Configuration {
        let value: JSONValue
        do {
            value = try JSONParser.parse(text, options: .init(json5: true))
        } catch {
            throw ConfigError(path: "", error.description)
        }
        var root = try ConfigNode(value)
        var config = Configuration()

        var spool = try root.node("spool")
        config.spool.path = try spool.string("path", default: config.spool.path)
        config.spool.retainHours = try spool.number(
            "retainHours", default: config.spool.retainHours, min: 0, max: 87_600)
        config.spool.maxBytes = Int64(try spool.integer("maxBytes", default: Int(config.spool.maxBytes), min: 1 << 20))
        config.spool.whenFull = try spool.choice("whenFull", default: config.spool.whenFull)
        config.spool.commitWindowMs = try spool.integer(
            "commitWindowMs", default: config.spool.commitWindowMs, min: 0, max: 5000)
        config.spool.stateSyncSeconds = try spool.number(
            "stateSyncSeconds", default: config.spool.stateSyncSeconds, min: 0, max: 300)
        try spool.finish()

        var ingest = try root.node("ingest")
        config.ingest.socket = try ingest.string("socket", default: config.ingest.socket)
        config.ingest.maxLineBytes = try ingest.integer(
            "maxLineBytes", default: config.ingest.maxLineBytes, min: 256, max: 1 << 20)
        config.ingest.maxFutureSeconds = try ingest.integer(
            "maxFutureSeconds", default: config.ingest.maxFutureSeconds, min: 0)
        config.ingest.maxConnections = try ingest.integer(
            "maxConnections", default: config.ingest.maxConnections, min: 1, max: 65536)
        var nmea = try ingest.node("nmea")
        if nmea.contains("hdopAccuracyMeters") {
            config.ingest.nmeaAccuracyPerHDOP = try nmea.number("hdopAccuracyMeters", default: 0, min: 0.1, max: 100)
        }
        try nmea.finish()
        var http = try ingest.node("http")
        config.ingest.httpListen = try http.optionalString("listen")
        if let value = http.value("devices") {
            switch value {
            case .string("*"): config.ingest.httpDevices = .any
            case .array(let items):
                var ids: Set<String> = []
                for (index, item) in items.enumerated() {
                    guard case .string(let id) = item, !id.isEmpty, id.utf8.count <= 128,
                        !ControlEscaping.containsControl(id)
                    else {
                        throw ConfigError(
                            path: "ingest.http.devices[\(index)]",
                            "expected a device id (at most 128 bytes, no control characters)")
                    }
                    ids.insert(id)
                }
                config.ingest.httpDevices = .listed(ids)
            default:
                throw ConfigError(path: "ingest.http.devices", "expected a list of device ids, or \"*\" for any")
            }
        }
        config.ingest.httpRequestsPerSecond = try http.integer(
            "maxRequestsPerSecond", default: config.ingest.httpRequestsPerSecond, min: 1, max: 10_000)
        try http.finish()
        var sbd = try ingest.node("sbd")
        config.ingest.sbd = try SBDShoreSettings.parse(&sbd)
        try ingest.finish()
        if config.ingest.socket.utf8.count > 107 {
            throw ConfigError(path: "ingest.socket", "path longer than the 107 bytes a Unix socket address holds")
        }

        if let items = try root.array("destinations") {
            config.destinations = []
            for (index, item) in items.enumerated() {
                let destination = try DestinationSettings(try ConfigNode(item, path: "destinations[\(index)]"))
                if config.destinations.contains(where: { $0.name == destination.name }) {
                    throw ConfigError(
                        path: "destinations[\(index)].name", "duplicate destination name \"\(destination.name)\"")
                }
                config.destinations.append(destination)
            }
        }
        // An accuracy level judges NMEA-derived positions by the receiver's UERE, as ingest does.
        for index in config.destinations.indices {
            config.destinations[index].filter.accuracyPerHDOP = config.ingest.nmeaAccuracyPerHDOP
        }
        if let items = try root.array("uplinks") { config.uplinks = try parseUplinks(items) }
        var metrics = try root.node("metrics")
        config.metricsListen = try metrics.optionalString("listen")
        try metrics.finish()
        var ui = try root.node("ui")
        config.uiListen = try ui.optionalString("listen")
        if let listen = config.uiListen {
            try Self.validateListen(listen, at: ui.child("listen"))
            if listen == config.ingest.httpListen {
                throw ConfigError(
                    path: ui.child("listen"),
                    "\(listen) is the phone listener's (ingest.http.listen): the page needs a port of its own, or metrics.listen's"
                )
            }
        }
        if let items = try ui.array("hosts") {
            config.uiHosts = []
            for (index, item) in items.enumerated() {
                guard case .string(let name) = item, !name.isEmpty,
                    name.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") })
                else {
                    throw ConfigError(
                        path: "ui.hosts[\(index)]", "expected a host name, as a browser's address bar has it")
                }
                config.uiHosts.append(name.lowercased())
            }
        }
        try ui.finish()
        var integrityNode = try root.node("integrity")
        let integrity = try IntegritySettings.parse(&integrityNode)
        try integrityNode.finish()
        if let items = try root.array("devices") {
            var seen = Set<String>()
            for (index, item) in items.enumerated() {
                var node = try ConfigNode(item, path: "devices[\(index)]")
                let id = try node.optionalString("id") ?? ""
                if id.isEmpty { throw ConfigError(path: node.child("id"), "a device id is required") }
                guard let list = try node.array("sources"), !list.isEmpty else {
                    throw ConfigError(path: node.child("sources"), "expected a list of source device ids, best first")
                }
                var sources: [String] = []
                for (position, value) in list.enumerated() {
                    guard case .string(let source) = value, !source.isEmpty else {
                        throw ConfigError(path: "\(node.child("sources"))[\(position)]", "expected a source device id")
                    }
                    guard source != id, seen.insert(source).inserted else {
                        throw ConfigError(
                            path: "\(node.child("sources"))[\(position)]",
                            "\"\(source)\" is already a source or is the device itself")
                    }
                    sources.append(source)
                }
                let failover = try node.number("failoverSeconds", default: 10, min: 1, max: 86_400)
                var judged = integrity
                if node.contains("separationMetres") {
                    judged.separationMetres = try node.number("separationMetres", default: 0, min: 0, max: 10_000)
                }
                try node.finish()
                config.devices.append(
                    DeviceSources(id: id, sources: sources, failoverSeconds: failover, integrity: judged))
            }
            if let clash = config.devices.first(where: { seen.contains($0.id) }) {
                throw ConfigError(path: "devices", "\"\(clash.id)\" is both a device and a source")
            }
        }
        if root.contains("sbd") {
            var sbd = try root.node("sbd")
            config.sbd = try SBDUplinkSettings.parse(&sbd, destinations: config.destinations.map(\.name))
        }
        try root.finish()
        try config.refuseLoops()
        return config
    }
}

extension Configuration {
    /// A listen address is `HOST:PORT` with an IPv4 host (empty: every interface) and a port
    /// of 1 to 65535, checked here so a typo stops the start with the key's path, not a bind error.
    static func validateListen(_ listen: String, at path: String) throws(ConfigError) {
        guard let colon = listen.lastIndex(of: ":") else {
            throw ConfigError(path: path, "expected HOST:PORT, e.g. \"0.0.0.0:8080\", got \"\(listen)\"")
        }
        let host = listen[..<colon]
        let portText = listen[listen.index(after: colon)...]
        guard let port = Int(portText), (1...65535).contains(port) else {
            throw ConfigError(path: path, "expected a port from 1 to 65535 after the colon, got \"\(portText)\"")
        }
        var address = in_addr()
        guard host.isEmpty || inet_pton(AF_INET, String(host), &address) == 1 else {
            throw ConfigError(
                path: path,
                "expected an IPv4 address (or nothing, for every interface) before the colon, got \"\(host)\"")
        }
    }

    /// A destination on this machine at the phone listener's port would send the
    /// relay's own positions back into it, for ever.
    func refuseLoops() throws(ConfigError) {
        guard let listen = ingest.httpListen, let colon = listen.lastIndex(of: ":"),
            let port = Int(listen[listen.index(after: colon)...])
        else { return }
        let local: Set<String> = ["127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"]
        for (index, destination) in destinations.enumerated() {
            guard let url = URL(string: destination.url), let host = url.host, local.contains(host) else { continue }
            if (url.port ?? (url.scheme == "https" ? 443 : 80)) == port {
                throw ConfigError(
                    path: "destinations[\(index)].url",
                    "points at this relay's own phone listener (ingest.http.listen \(listen)): positions would loop")
            }
        }
    }
}

extension Configuration.DestinationSettings {
    init(_ node: ConfigNode) throws(ConfigError) {
        var node = node
        self.init()
        kind = try node.choice("type", default: kind)
        name = try node.string("name", default: kind.rawValue)
        if name.isEmpty || name.utf8.count > 64 || name.contains(where: { $0.isWhitespace || $0.isNewline }) {
            throw ConfigError(path: node.child("name"), "expected 1 to 64 characters without spaces")
        }
        if kind == .push {
            guard let pushURL = try node.optionalString("url"), !pushURL.trimmingWhitespace.isEmpty else {
                throw ConfigError(path: node.child("url"), "CONFIGURATION_ERROR: url is required and may not be blank")
            }
            url = pushURL
            concurrency = 1
            filter.distanceMeters = 50
            push = try PushSettings.read(&node)
        } else {
            traccarProtocol = try node.choice("protocol", default: traccarProtocol)
            url = try node.string("url", default: traccarProtocol == .teltonika ? "tcp://127.0.0.1:5027" : url)
            pipeline = try node.integer("pipeline", default: pipeline, min: 1, max: 1024)
        }
        if traccarProtocol == .teltonika {
            // Each device sends on a connection of its own, one frame in flight: every device of a
            // round sends at once by default, so a fleet's current positions take one round trip
            // over a satellite link, not one per four devices.
            concurrency = Configuration.teltonikaConcurrency
            try Self.validateTCPURL(url, at: node.child("url"))
        } else {
            try Self.validateURL(url, at: node.child("url"))
        }
        buffer = try node.bool("buffer", default: buffer)
        concurrency = try node.integer("concurrency", default: concurrency, min: 1, max: 64)
        requestTimeoutSeconds = try node.number("timeoutSeconds", default: requestTimeoutSeconds, min: 1, max: 3_600)
        connectTimeoutSeconds = try node.number(
            "connectTimeoutSeconds", default: connectTimeoutSeconds, min: 1, max: 3_600)
        parkSeconds = try node.number("unknownDeviceRetrySeconds", default: parkSeconds, min: 1, max: 604_800)
        order = try node.choice("order", default: order)
        currentWithinSeconds = try node.number(
            "currentWithinSeconds", default: currentWithinSeconds, min: 1, max: 86_400)
        var backoff = try node.node("backoff")
        backoffMinSeconds = try backoff.number("minSeconds", default: backoffMinSeconds, min: 0.1, max: 86_400)
        backoffMaxSeconds = try backoff.number(
            "maxSeconds", default: backoffMaxSeconds, min: backoffMinSeconds, max: 86_400)
        try backoff.finish()
        var probe = try node.node("probe")
        probeURL = try probe.optionalString("url")
        if let probeURL { try Self.validateURL(probeURL, at: probe.child("url")) }
        probeIntervalSeconds = try probe.number("intervalSeconds", default: probeIntervalSeconds, min: 1, max: 86_400)
        probeConnectSeconds = try probe.number("connectSeconds", default: probeConnectSeconds, min: 0, max: 86_400)
        try probe.finish()
        var filterNode = try node.node("filter")
        filter = try FilterSettings.read(&filterNode, defaults: filter)
        tls.caFile = try node.optionalString("caFile")
        if let caFile = tls.caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw ConfigError(path: node.child("caFile"), "cannot read the CA file \(caFile)")
        }
        tls.insecure = try node.bool("insecure", default: false)
        if tls.insecure, tls.caFile != nil {
            throw ConfigError(
                path: node.child("insecure"),
                "insecure: true turns verification off, so caFile would be ignored; keep one")
        }
        try node.finish()
    }

    /// `tcp://host:port` or `tls://host:port` (a Teltonika port; 5027 when no port is given).
    static func validateTCPURL(_ text: String, at path: String) throws(ConfigError) {
        if let scheme = URL(string: text)?.scheme?.lowercased(), scheme == "http" || scheme == "https" {
            throw ConfigError(
                path: path,
                #"protocol "teltonika" speaks TCP to Traccar's Teltonika port: use tcp://host:5027 or tls://host:port; http:// and https:// URLs are for protocol "osmand""#
            )
        }
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "tcp" || scheme == "tls",
            let host = url.host, !host.isEmpty, url.path.isEmpty || url.path == "/", url.query == nil, url.user == nil
        else {
            throw ConfigError(
                path: path, "expected a tcp://host:port or tls://host:port URL for the Teltonika protocol")
        }
    }

    static func validateURL(_ text: String, at path: String) throws(ConfigError) {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = url.host, !host.isEmpty
        else {
            throw ConfigError(path: path, "expected an http:// or https:// URL with a host")
        }
    }
}

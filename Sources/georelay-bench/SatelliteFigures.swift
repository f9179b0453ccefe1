import Foundation
import GeoRelayCore
import GeoRelayTestKit
import Glibc
import Synchronization

/// A fleet behind one link: `units` receivers, each with a fix every `fixSeconds`.
struct Fleet {
    var units: Int
    var fixSeconds: Int

    /// LINKS.md's standard outage: one vessel, 1 Hz.
    static let vessel = Fleet(units: 1, fixSeconds: 1)
    /// The fleet: 40 units behind one terminal, a fix every 5 s from each.
    static let forty = Fleet(units: 40, fixSeconds: 5)

    var devices: [String] { units == 1 ? ["vessel"] : (0..<units).map { String(format: "unit%02d", $0) } }
}

/// The standard outage of `../shared/LINKS.md` on the `geo` link, per transport: a vessel at
/// 5 m/s with 1 Hz fixes, default filters, the link down for two hours (the history is written
/// with fix times of the last two hours while the relay's link is refused), then up with live
/// fixes still arriving at 1 Hz; and beside it a fleet of 40 units with a fix every 5 s each. The
/// relay is the real binary with its default backoff and probe timings; it is left down long
/// enough (`downSeconds`) for its probes to reach their steady interval, as after a real
/// two-hour outage. The link is one link: every connection shares its bandwidth.
func satelliteFigure() throws {
    // GEORELAY_BENCH_LINK=geo-slow or narrowband for LINKS.md's slower profiles.
    let linkName = ProcessInfo.processInfo.environment["GEORELAY_BENCH_LINK"] ?? "geo"
    guard let link = LinkProfile.satellites.first(where: { $0.name == linkName }) else {
        throw BenchError(
            "GEORELAY_BENCH_LINK: no link profile \(linkName) (\(LinkProfile.satellites.map(\.name).joined(separator: ", ")))"
        )
    }
    let hours = quick ? 0.5 : 2.0
    var transports = ["osmand", "teltonika", "push"]
    if let only = ProcessInfo.processInfo.environment["GEORELAY_BENCH_TRANSPORTS"] {
        transports = only.split(separator: ",").map(String.init)
    }
    // GEORELAY_BENCH_TERMINAL=refuse,close,hold,drop (or all): what the terminal does while its
    // satellite is down (LINKS.md); refuse by default.
    let terminalNames = ProcessInfo.processInfo.environment["GEORELAY_BENCH_TERMINAL"] ?? "refuse"
    let terminals =
        terminalNames == "all"
        ? TerminalKind.allCases
        : try terminalNames.split(separator: ",").map { name in
            guard let kind = TerminalKind(rawValue: String(name)) else {
                throw BenchError("GEORELAY_BENCH_TERMINAL: no terminal kind \(name) (refuse, close, hold, drop, all)")
            }
            return kind
        }
    // GEORELAY_BENCH_WIRE=kernel: over `SatelliteWire` (real TCP end to end through TUN devices;
    // the terminal drops while down) instead of the fault proxy.
    let kernelWire = ProcessInfo.processInfo.environment["GEORELAY_BENCH_WIRE"] == "kernel"
    var fleets = [Fleet.vessel, Fleet.forty]
    if let units = ProcessInfo.processInfo.environment["GEORELAY_BENCH_UNITS"].flatMap(Int.init) {
        fleets = fleets.filter { $0.units == units }
    }
    for fleet in fleets {
        for transport in transports {
            for terminal in terminals {
                let result = try standardOutage(
                    transport: transport, link: link, fleet: fleet, historySeconds: Int(hours * 3600),
                    terminal: terminal, kernelWire: kernelWire)
                emit(
                    "satellite_outage_\(transport)\(fleet.units == 1 ? "" : "_fleet\(fleet.units)")\(link.name == "geo" ? "" : "_\(link.name)")\(kernelWire ? "_kernel" : terminal == .refuse ? "" : "_\(terminal)")",
                    [
                        ("link", .string(link.name)),
                        ("terminal", .string(kernelWire ? "drop (kernel wire)" : terminal.rawValue)),
                        ("outage_hours", .number(hours)),
                        ("units", .number(Double(fleet.units))),
                        ("first_arrival_s", .number(result.firstArrivalSeconds.rounded(to: 1))),
                        ("current_position_s", .number(result.currentSeconds.rounded(to: 1))),
                        ("every_unit_current_s", .number(result.everyUnitCurrentSeconds.rounded(to: 1))),
                        ("drained_s", .number(result.drainedSeconds.rounded(to: 1))),
                        ("positions_delivered", .number(Double(result.delivered))),
                        ("link_bytes_per_position", .number(result.bytesPerPosition.rounded(to: 1))),
                        ("limit_s", .number(result.limitSeconds.rounded(to: 1))),
                        ("order", .string(ProcessInfo.processInfo.environment["GEORELAY_BENCH_ORDER"] ?? "auto")),
                        ("traccar_events_skipped", result.eventsSkipped.map { .number(Double($0)) } ?? .null),
                        (
                            "report_error_pct_worst",
                            result.reportErrorPercent.map { .number($0.rounded(to: 2)) } ?? .null
                        ),
                        ("live_lag_max_s", result.liveLagMaxSeconds.map { .number($0.rounded(to: 1)) } ?? .null),
                        ("live_lag_median_s", result.liveLagMedianSeconds.map { .number($0.rounded(to: 1)) } ?? .null),
                        ("live_fixes_during_drain", .number(Double(result.liveFixes))),
                        ("live_fixes_overtaken", .number(Double(result.liveOvertaken))),
                        ("live_fixes_with_the_backlog", .number(Double(result.liveWithTheBacklog))),
                        ("terminal_bytes_per_hour_down", .number(result.terminalBytesPerHourDown.rounded())),
                        ("connections_per_hour_down", .number(result.connectionsPerHourDown.rounded())),
                        ("target", .string(satelliteTarget(transport, fleet: fleet))),
                    ])
            }
        }
    }
}

private func satelliteTarget(_ transport: String, fleet: Fleet) -> String {
    if transport == "osmand-serial" { return "today's one request per round trip (the baseline)" }
    return fleet.units == 1
        ? "current <= 8 s (history first: 0 Traccar events skipped), report within 1 %, drained <= 1.5 x limit"
        : "every unit current <= 10 s, report within 1 %, drained <= 1.5 x limit"
}

extension Double {
    fileprivate func rounded(to digits: Int) -> Double {
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        return (self * scale).rounded() / scale
    }
}

struct OutageResult {
    /// Until the first position arrived: the wait for a probe to notice the link.
    var firstArrivalSeconds: Double
    /// Until the first unit's current position arrived.
    var currentSeconds: Double
    /// Until every unit's current position had arrived.
    var everyUnitCurrentSeconds: Double
    var drainedSeconds: Double
    var delivered: Int
    var bytesPerPosition: Double
    var limitSeconds: Double
    /// While down, once settled, scaled to an hour: the bytes the relay sent into the terminal
    /// (none of them cross while its satellite is down) and the connections it accepted.
    var terminalBytesPerHourDown: Double
    var connectionsPerHourDown: Double
    /// Through the model of Traccar's processing: history positions its event handlers skipped,
    /// and the worst unit's summary report over the outage against the path it sailed (per cent).
    var eventsSkipped: Int?
    var reportErrorPercent: Double?
    /// Live fixes answered `ok` once the server had a current position and before the drain
    /// ended, that reached the server as their device's newest ahead of some of its history: the
    /// longest and the median from a fix's `ok` until the server had it (issue 36 §2), and how many.
    var liveLagMaxSeconds: Double?
    var liveLagMedianSeconds: Double?
    var liveFixes = 0
    /// Live fixes that arrived behind a newer fix of their device: sent as history, not live.
    var liveOvertaken = 0
    /// Live fixes that arrived as their device's newest but after all its history: with the
    /// backlog's end, which its filter chain kept where the live edge's had not.
    var liveWithTheBacklog = 0
}

/// What a fake server holds, for the figure: each device's fix times as they arrived.
private protocol FixSink {
    var fixes: [(device: String, timeMs: Int64)] { get }
    var port: Int { get }
    func stop()
    /// What Traccar made of the arrivals (`TraccarModel`); nil for the push gateway.
    func traccar() -> TraccarModel?
}

extension FixSink {
    func traccar() -> TraccarModel? { nil }
}

private struct OsmAndSink: FixSink {
    let server: FakeOsmAndServer
    var fixes: [(device: String, timeMs: Int64)] { server.positions.map { ($0.uniqueId, $0.fixTimeMs) } }
    var port: Int { server.http.port }
    func stop() { server.http.stop() }
    func traccar() -> TraccarModel? { server.traccar() }
}

private struct TeltonikaSink: FixSink {
    let server: FakeTeltonikaServer
    var fixes: [(device: String, timeMs: Int64)] { server.positions.map { ($0.uniqueId, $0.fixTimeMs) } }
    var port: Int { server.port }
    func stop() { server.stop() }
    func traccar() -> TraccarModel? { server.traccar() }
}

private struct PushSink: FixSink {
    let server: FakePushServer
    var fixes: [(device: String, timeMs: Int64)] {
        server.points.compactMap { point in
            Timestamp.milliseconds(fromISO8601: point.timestamp).map {
                (String(point.trackerId.prefix { $0 != "@" }), $0)
            }
        }
    }
    var port: Int { server.http.port }
    func stop() { server.http.stop() }
}

/// The link a satellite figure runs over: the fault proxy on loopback (every terminal kind), or
/// the kernel wire (`SatelliteWire`: real TCP end to end; down drops everything).
private enum BenchLink {
    case proxy(FaultProxy, TerminalKind)
    case wire(NetworkLab, SatelliteWire)

    var isWire: Bool { if case .wire = self { true } else { false } }

    func setDown(_ down: Bool) {
        switch self {
        case .proxy(let proxy, let terminal): proxy.setMode(down ? terminal.downMode : .pass)
        case .wire(_, let wire): wire.setDown(down)
        }
    }

    /// Bytes each way, bytes sent into the terminal while down, and connections it accepted.
    var counters: (up: Int, down: Int, upWhileDown: Int, connections: Int) {
        switch self {
        case .proxy(let proxy, _):
            let c = proxy.counters
            return (c.bytesUp, c.bytesDown, c.bytesUpWhileDown, c.connections)
        case .wire(_, let wire):
            let c = wire.current
            return (c.bytesUp, c.bytesDown, 0, 0)
        }
    }

    func stop() {
        switch self {
        case .proxy(let proxy, _): proxy.stop()
        case .wire(_, let wire): wire.stop()
        }
    }
}

private func standardOutage(
    transport: String, link: LinkProfile, fleet: Fleet, historySeconds: Int, downSeconds: Double = 40,
    terminal: TerminalKind = .refuse, kernelWire: Bool = false
) throws -> OutageResult {
    let lab = try kernelWire ? NetworkLab() : nil
    let sink: FixSink
    let pushServer: FakePushServer?
    // The fakes listen where the relay reaches them: on loopback behind the proxy, or in the
    // lab's server-side namespace at the far end of the kernel wire.
    func listening<T: Sendable>(_ make: @escaping @Sendable (String) throws -> T) throws -> T {
        guard let lab else { return try make("127.0.0.1") }
        return try lab.onServerSide { try make("0.0.0.0") }
    }
    switch transport {
    case "push":
        let server = try listening { try FakePushServer(host: $0) }
        sink = PushSink(server: server)
        pushServer = server
    case "teltonika":
        sink = TeltonikaSink(server: try listening { try FakeTeltonikaServer(host: $0) })
        pushServer = nil
    default:
        sink = OsmAndSink(server: try listening { try FakeOsmAndServer(host: $0) })
        pushServer = nil
    }
    defer { sink.stop() }
    let bench: BenchLink
    let via: String
    if let lab {
        bench = .wire(
            lab,
            try SatelliteWire(
                lab: lab, bytesPerSecond: link.bytesPerSecond, oneWayMs: link.oneWayMs,
                tracing: ProcessInfo.processInfo.environment["GEORELAY_BENCH_TRACE"] != nil))
        via = "http://\(lab.serverAddress):\(sink.port)"
    } else {
        let proxy = try FaultProxy(
            targetPort: sink.port, bytesPerSecond: link.bytesPerSecond, latencyMs: link.oneWayMs)
        bench = .proxy(proxy, terminal)
        via = "http://127.0.0.1:\(proxy.port)"
    }
    defer { bench.stop() }
    bench.setDown(true)
    // GEORELAY_BENCH_ORDER=current-first or oldest-first: the destination's `order` (default auto).
    let order = ProcessInfo.processInfo.environment["GEORELAY_BENCH_ORDER"].map { #", order: "\#($0)""# } ?? ""
    let destination: String
    switch transport {
    case "push":
        let server = pushServer!
        setenv("GEORELAY_BENCH_API_KEY", server.expected.apiKey, 1)
        destination = """
            { type: "push", url: "\(via)/push", authBaseUrl: "\(via)/auth/", registrationBaseUrl: "\(via)/reg/",
              apiKey: { env: "GEORELAY_BENCH_API_KEY" }, clientId: "\(server.expected.clientID)", tenant: "\(server.expected.tenant)",
              username: "\(server.expected.username)" }
            """
    case "osmand-serial":
        destination = #"{ url: "\#(via)", pipeline: 1\#(order) }"#
    case "teltonika":
        destination =
            #"{ protocol: "teltonika", url: "\#(via.replacingOccurrences(of: "http://", with: "tcp://"))"\#(order) }"#
    default:
        destination = #"{ url: "\#(via)"\#(order) }"#
    }
    let directory = try TemporaryDirectory()
    let relay = try BenchRelay(directory: directory, destinationURL: deadURL())
    try """
    { spool: { path: "\(directory.file("spool.db"))" }, ingest: { socket: "\(relay.socketPath)" }, destinations: [\(destination)] }
    """.write(toFile: relay.configPath, atomically: true, encoding: .utf8)
    try relay.start(lab: lab)
    defer { relay.stop() }
    let started = WallClock.nowMs()
    let client = try UnixLineClient(path: relay.socketPath)
    try client.write(#"{"hello":{"device":"vessel","ack":true}}"# + "\n")
    _ = client.readLine()
    let devices = fleet.devices
    let everyMs = Int64(fleet.fixSeconds) * 1000
    // Online before the outage, as a relay at sea is when its satellite goes: each unit's fix from
    // just before the history reaches the server (a push destination has its token, the server
    // knows the devices), then the link goes down. GEORELAY_BENCH_START=down: the relay starts
    // with the link down instead (a push destination logs in after the link's return), as the
    // figures before 2026-12-05's fifth session were measured.
    if ProcessInfo.processInfo.environment["GEORELAY_BENCH_START"] != "down" {
        bench.setDown(false)
        let before = devices.enumerated().map { index, device in
            vesselTrack(
                device: device, count: 1, everyMs: everyMs,
                endingAtMs: started - Int64(historySeconds / fleet.fixSeconds) * everyMs, offset: Double(index))[0]
        }
        try client.write(before.map(fixLine).joined())
        _ = client.readLines(before.count)
        let onlineBy = WallClock.monotonicNs() + 60_000_000_000
        // Until the relay has the answers too: a round cut off with its answer on the way is not
        // how a relay goes to sea (it would learn nothing of the server's keep-alive).
        while sink.fixes.count < devices.count || !pending(relay: relay, atMost: 0) {
            guard WallClock.monotonicNs() < onlineBy else {
                throw BenchError(
                    "\(transport): the units' fixes before the outage were not delivered (the server has them and the relay its answers) within 60 s"
                )
            }
            usleep(100_000)
        }
        bench.setDown(true)
    }
    // The outage's history, then live fixes from a thread of their own until the figure is done.
    var lasts: [Position] = []
    var histories: [String: [Position]] = [:]
    for (index, device) in devices.enumerated() {
        let history = vesselTrack(
            device: device, count: historySeconds / fleet.fixSeconds, everyMs: Int64(fleet.fixSeconds) * 1000,
            endingAtMs: started, offset: Double(index))
        try client.write(history.map(fixLine).joined())
        _ = client.readLines(history.count)
        lasts.append(history.last!)
        histories[device] = history
    }
    let live = Atomic<Bool>(true)
    let liveDone = DispatchSemaphore(value: 0)
    let starts = lasts
    Thread {
        var positions = starts
        var next = WallClock.monotonicNs()
        while live.load(ordering: .relaxed) {
            next += UInt64(fleet.fixSeconds) * 1_000_000_000
            let wait = Int64(next) - Int64(WallClock.monotonicNs())
            if wait > 0 { usleep(UInt32(wait / 1000)) }
            let now = WallClock.nowMs()
            positions = positions.map { step($0, timeMs: now) }
            try? client.write(positions.map(fixLine).joined())
            _ = client.readLines(positions.count)
        }
        liveDone.signal()
    }.start()
    defer {
        live.store(false, ordering: .relaxed)
        liveDone.wait()
    }
    // Down long enough for the probes to settle at their interval, as after two hours; what the
    // relay sends into the terminal is counted over the last three quarters, once it has settled.
    usleep(UInt32(downSeconds * 250_000))
    let settled = bench.counters
    usleep(UInt32(downSeconds * 750_000))
    let before = bench.counters
    let perHourDown = 3600 / (downSeconds * 0.75)
    let heldBefore = sink.fixes.count
    let linkUpMs = WallClock.nowMs()
    let linkUp = WallClock.monotonicNs()
    bench.setDown(false)
    var firstAt: UInt64?
    var currentAt: UInt64?
    var everyUnitAt: UInt64?
    var drainedAt: UInt64?
    /// When the server last gained a fix from before link-up: the drain's end as the server sees it.
    var historyGrewAt: UInt64?
    var historyHeld = heldBefore
    /// Fixes already looked at (the sink lists them in arrival order), and when the server first had
    /// a current position, on the wall clock the live fixes' times are on.
    var looked = 0
    var currentAtMs: Int64?
    /// Live fixes that arrived as their device's newest: device, fix time and how long after it.
    var liveArrivals: [(device: String, timeMs: Int64, lagMs: Int64)] = []
    var newestSeen: [String: Int64] = [:]
    var overtaken = 0
    let deadline = linkUp + 1_200_000_000_000
    while drainedAt == nil, WallClock.monotonicNs() < deadline {
        let fixes = sink.fixes
        // The current position: a fix from no more than 20 s before link-up.
        let current = Set(fixes.filter { $0.timeMs >= linkUpMs - 20_000 }.map(\.device))
        let history = fixes.count { $0.timeMs < linkUpMs }
        let now = WallClock.monotonicNs()
        if history > historyHeld { (historyHeld, historyGrewAt) = (history, now) }
        if firstAt == nil, fixes.count > heldBefore { firstAt = now }
        if currentAt == nil, !current.isEmpty { (currentAt, currentAtMs) = (now, WallClock.nowMs()) }
        // A live fix's time is when it was written and answered `ok`: its lag is until it is seen here
        // (within the loop's 200 ms), once the server has a current position for it to be newer than.
        // One that arrives behind a newer one went as history (overtaken) and is counted apart.
        let seenMs = WallClock.nowMs()
        for fix in fixes.dropFirst(looked) {
            let live = fix.timeMs >= (currentAtMs ?? .max) && drainedAt == nil
            if fix.timeMs > newestSeen[fix.device] ?? .min {
                if live { liveArrivals.append((fix.device, fix.timeMs, seenMs - fix.timeMs)) }
                newestSeen[fix.device] = fix.timeMs
            } else if live {
                overtaken += 1
            }
        }
        looked = fixes.count
        if everyUnitAt == nil, current.count == devices.count { everyUnitAt = now }
        // Drained: the relay's status shows nothing pending but the live fixes of the moment, or
        // (a status that holds acknowledgements for the state interval lags the server) the
        // server has gained no fix from before link-up for 20 s. Either way the figure is when
        // the last of them arrived.
        if let grew = historyGrewAt, fixes.count > heldBefore,
            pending(relay: relay, atMost: devices.count) || now - grew > 20_000_000_000
        {
            drainedAt = grew
        }
        usleep(200_000)
    }
    let after = bench.counters
    // GEORELAY_BENCH_TRACE=file: the kernel wire's packets from link-up, as CSV (seconds, way, bytes).
    if case .wire(_, let wire) = bench, let path = ProcessInfo.processInfo.environment["GEORELAY_BENCH_TRACE"] {
        let rows = wire.timeline.filter { $0.ns >= linkUp }.map {
            "\(Double($0.ns - linkUp) / 1e9),\($0.up ? "up" : "down"),\($0.bytes)"
        }
        try ("seconds,way,bytes\n" + rows.joined(separator: "\n") + "\n").write(
            toFile: path, atomically: true, encoding: .utf8)
    }
    let delivered = sink.fixes.count - heldBefore
    let up = after.up - before.up
    let down = after.down - before.down
    let rtt = 2 * Double(link.oneWayMs) / 1000
    func seconds(_ at: UInt64?) -> Double { Double((at ?? deadline) - linkUp) / 1e9 }
    var result = OutageResult(
        firstArrivalSeconds: seconds(firstAt), currentSeconds: seconds(currentAt),
        everyUnitCurrentSeconds: seconds(everyUnitAt),
        drainedSeconds: seconds(drainedAt),
        delivered: delivered,
        bytesPerPosition: Double(up + down) / Double(max(1, delivered)),
        limitSeconds: Double(max(up, down)) / Double(link.bytesPerSecond) + 2 * rtt,
        terminalBytesPerHourDown: Double(before.upWhileDown - settled.upWhileDown) * perHourDown,
        connectionsPerHourDown: Double(before.connections - settled.connections) * perHourDown)
    // A live fix went ahead of its device's history when history of that device arrived after it;
    // one that arrived after all of it came in order with the backlog's end (where the filter's
    // chain over the history, not the live edge's, kept it), and is counted apart.
    var oldestAfter: [String: Int64] = [:]
    var wentAhead: Set<String> = []
    for fix in sink.fixes.reversed() {
        if fix.timeMs > oldestAfter[fix.device] ?? .max { wentAhead.insert("\(fix.device) \(fix.timeMs)") }
        oldestAfter[fix.device] = min(oldestAfter[fix.device] ?? .max, fix.timeMs)
    }
    let liveLags = liveArrivals.filter { wentAhead.contains("\($0.device) \($0.timeMs)") }.map(\.lagMs)
    if ProcessInfo.processInfo.environment["GEORELAY_BENCH_VERBOSE"] != nil {
        for arrival in liveArrivals where arrival.lagMs > 3000 {
            note(
                "live fix of \(arrival.device) written \(arrival.timeMs - linkUpMs) ms after link-up reached the server \(arrival.lagMs) ms later\(wentAhead.contains("\(arrival.device) \(arrival.timeMs)") ? "" : ", with the backlog's end")"
            )
        }
    }
    result.liveLagMaxSeconds = liveLags.max().map { Double($0) / 1000 }
    result.liveLagMedianSeconds = liveLags.isEmpty ? nil : Double(liveLags.sorted()[liveLags.count / 2]) / 1000
    result.liveFixes = liveLags.count
    result.liveOvertaken = overtaken
    result.liveWithTheBacklog = liveArrivals.count - liveLags.count
    if let traccar = sink.traccar() {
        result.eventsSkipped = traccar.skippedByEvents
        result.reportErrorPercent = histories.compactMap { device, history -> Double? in
            let sailed = zip(history, history.dropFirst()).reduce(0.0) {
                $0 + Geo.distance(lat1: $1.0.lat, lon1: $1.0.lon, lat2: $1.1.lat, lon2: $1.1.lon)
            }
            guard sailed > 0,
                let report = traccar.devices[device]?.reportDistance(
                    fromMs: history.first!.timeMs, toMs: history.last!.timeMs)
            else { return nil }
            return abs(report - sailed) / sailed * 100
        }.max()
    }
    func text(_ value: Double) -> String { String(format: "%.1f", value) }
    note(
        "satellite \(transport), \(devices.count) unit(s): \(devices.count * historySeconds / fleet.fixSeconds) fixes of history, \(delivered) delivered after link-up; up \(up) B, down \(down) B; "
            + "first position after \(text(result.firstArrivalSeconds)) s, a current position after \(text(result.currentSeconds)) s, every unit's after \(text(result.everyUnitCurrentSeconds)) s, "
            + "drained after \(text(result.drainedSeconds)) s, limit \(text(result.limitSeconds)) s; "
            + "live fixes during the drain: \(result.liveFixes) ahead of history (\(result.liveOvertaken) more overtaken, \(result.liveWithTheBacklog) with the backlog's end), from ok to the server \(result.liveLagMedianSeconds.map(text) ?? "-") s median, \(result.liveLagMaxSeconds.map(text) ?? "-") s the longest"
    )
    if ProcessInfo.processInfo.environment["GEORELAY_BENCH_VERBOSE"] != nil, let log = relay.process?.stderrText() {
        note("relay log:\n\(log)")
    }
    return result
}

/// Whether the relay's status shows at most `count` positions pending (a unit's live fix each in flight).
private func pending(relay: BenchRelay, atMost count: Int) -> Bool {
    guard
        let result = try? RelayProcess.command(
            ["status", "--json", "--config", relay.configPath], directory: relay.directory.path),
        case .object(let status)? = try? JSONParser.parse(result.stdout),
        case .array(let destinations)? = status["destinations"]
    else { return false }
    return destinations.allSatisfy { destination in
        guard case .object(let fields) = destination, case .number(let pending)? = fields["pending"] else {
            return false
        }
        return pending <= Double(count)
    }
}

private func fixLine(_ p: Position) -> String {
    #"{"device":"\#(p.device)","time":\#(p.timeMs),"lat":\#(p.lat),"lon":\#(p.lon),"speed":\#(p.speed!),"course":\#(p.course!),"alt":\#(p.altitude!),"accuracy":\#(p.accuracy!)}"#
        + "\n"
}

/// A vessel under way at 5 m/s, one fix every `everyMs`, the last one that long before
/// `endingAtMs`; `offset` spreads a fleet's starting points.
private func vesselTrack(device: String, count: Int, everyMs: Int64, endingAtMs: Int64, offset: Double) -> [Position] {
    var positions: [Position] = []
    var position = Position(
        device: device, timeMs: endingAtMs - Int64(count) * everyMs, lat: 59.9 + offset * 0.01, lon: 10.7,
        speed: 5, course: 45, altitude: 12, accuracy: 4)
    for i in 0..<count {
        position = step(position, timeMs: endingAtMs - Int64(count - i) * everyMs)
        positions.append(position)
    }
    return positions
}

private func step(_ p: Position, timeMs: Int64) -> Position {
    var next = p
    let seconds = Double(timeMs - p.timeMs) / 1000
    let course = (p.course ?? 45) + sin(Double(timeMs / 1000) / 300) * 0.5
    next.timeMs = timeMs
    next.lat = ((p.lat + 5 * seconds * cos(course * .pi / 180) / 111_320) * 1e6).rounded() / 1e6
    next.lon =
        ((p.lon + 5 * seconds * sin(course * .pi / 180) / (111_320 * cos(p.lat * .pi / 180))) * 1e6).rounded() / 1e6
    next.course = (course.truncatingRemainder(dividingBy: 360) * 10).rounded() / 10
    return next
}

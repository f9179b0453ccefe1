import Foundation
import Glibc
import GeoRelayCore
import GeoRelayTestKit
import Synchronization

/// A link profile from `../shared/LINKS.md`.
struct LinkProfile {
    var name: String
    var oneWayMs: Int
    var bytesPerSecond: Int

    static let geo = LinkProfile(name: "geo", oneWayMs: 300, bytesPerSecond: 256_000 / 8)
}

/// The standard outage of `../shared/LINKS.md` on the `geo` link, per transport: a vessel at
/// 5 m/s with 1 Hz fixes, default filters, the link down for two hours (the history is written
/// with fix times of the last two hours while the relay's link is refused), then up with live
/// fixes still arriving at 1 Hz. The relay is the real binary with its default backoff and probe
/// timings; it is left down long enough (`downSeconds`) for its probes to reach their steady
/// interval, as after a real two-hour outage.
func satelliteFigure() throws {
    let link = LinkProfile.geo
    let hours = quick ? 0.5 : 2.0
    var transports = ["osmand", "teltonika", "push"]
    if let only = ProcessInfo.processInfo.environment["GEORELAY_BENCH_TRANSPORTS"] { transports = only.split(separator: ",").map(String.init) }
    for transport in transports {
        let result = try standardOutage(transport: transport, link: link, historySeconds: Int(hours * 3600))
        emit("satellite_outage_\(transport)", [
            ("link", .string(link.name)), ("outage_hours", .number(hours)),
            ("first_arrival_s", .number(result.firstArrivalSeconds.rounded(to: 1))),
            ("current_position_s", .number(result.currentSeconds.rounded(to: 1))),
            ("drained_s", .number(result.drainedSeconds.rounded(to: 1))),
            ("positions_delivered", .number(Double(result.delivered))),
            ("link_bytes_per_position", .number(result.bytesPerPosition.rounded(to: 1))),
            ("limit_s", .number(result.limitSeconds.rounded(to: 1))),
            ("target", .string(satelliteTarget(transport))),
        ])
    }
}

private func satelliteTarget(_ transport: String) -> String {
    switch transport {
    case "osmand": "current <= 20 s, drained <= 60 s, <= 200 B/position"
    case "osmand-serial": "today's one request per round trip (the baseline)"
    case "teltonika": "current <= 20 s, drained <= 30 s, <= 45 B/position"
    default: "as measured"
    }
}

private extension Double {
    func rounded(to digits: Int) -> Double {
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        return (self * scale).rounded() / scale
    }
}

struct OutageResult {
    /// Until the first position arrived: the wait for a probe to notice the link.
    var firstArrivalSeconds: Double
    var currentSeconds: Double
    var drainedSeconds: Double
    var delivered: Int
    var bytesPerPosition: Double
    var limitSeconds: Double
}

/// What a fake server holds, for the figure: fix times as they arrived.
private protocol FixSink {
    var fixTimes: [Int64] { get }
    var port: Int { get }
    func stop()
}

private struct OsmAndSink: FixSink {
    let server: FakeOsmAndServer
    var fixTimes: [Int64] { server.positions.map(\.fixTimeMs) }
    var port: Int { server.http.port }
    func stop() { server.http.stop() }
}

private struct TeltonikaSink: FixSink {
    let server: FakeTeltonikaServer
    var fixTimes: [Int64] { server.positions.map(\.fixTimeMs) }
    var port: Int { server.port }
    func stop() { server.stop() }
}

private struct PushSink: FixSink {
    let server: FakePushServer
    var fixTimes: [Int64] { server.points.compactMap { Timestamp.milliseconds(fromISO8601: $0.timestamp) } }
    var port: Int { server.http.port }
    func stop() { server.http.stop() }
}

private func standardOutage(transport: String, link: LinkProfile, historySeconds: Int, downSeconds: Double = 40) throws -> OutageResult {
    let sink: FixSink
    let pushServer: FakePushServer?
    switch transport {
    case "push":
        let server = try FakePushServer()
        sink = PushSink(server: server)
        pushServer = server
    case "teltonika":
        sink = TeltonikaSink(server: try FakeTeltonikaServer())
        pushServer = nil
    default:
        sink = OsmAndSink(server: try FakeOsmAndServer())
        pushServer = nil
    }
    defer { sink.stop() }
    let proxy = try FaultProxy(targetPort: sink.port, bytesPerSecond: link.bytesPerSecond, latencyMs: link.oneWayMs)
    defer { proxy.stop() }
    proxy.setMode(.refuse)
    let via = "http://127.0.0.1:\(proxy.port)"
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
        destination = #"{ url: "\#(via)", pipeline: 1 }"#
    case "teltonika":
        destination = #"{ protocol: "teltonika", url: "tcp://127.0.0.1:\#(proxy.port)" }"#
    default:
        destination = #"{ url: "\#(via)" }"#
    }
    let directory = try TemporaryDirectory()
    let relay = try BenchRelay(directory: directory, destinationURL: deadURL())
    try """
        { spool: { path: "\(directory.file("spool.db"))" }, ingest: { socket: "\(relay.socketPath)" }, destinations: [\(destination)] }
        """.write(toFile: relay.configPath, atomically: true, encoding: .utf8)
    try relay.start()
    defer { relay.stop() }
    let started = WallClock.nowMs()
    let client = try UnixLineClient(path: relay.socketPath)
    try client.write(#"{"hello":{"device":"vessel","ack":true}}"# + "\n")
    _ = client.readLine()
    // The outage's history, then live fixes at 1 Hz from a thread of their own until the figure is done.
    let history = vesselTrack(count: historySeconds, endingAtMs: started)
    try client.write(history.map(fixLine).joined())
    _ = client.readLines(history.count)
    let live = Atomic<Bool>(true)
    let liveDone = DispatchSemaphore(value: 0)
    let last = history.last!
    Thread {
        var position = last
        var next = WallClock.monotonicNs()
        while live.load(ordering: .relaxed) {
            next += 1_000_000_000
            let wait = Int64(next) - Int64(WallClock.monotonicNs())
            if wait > 0 { usleep(UInt32(wait / 1000)) }
            position = step(position, timeMs: WallClock.nowMs())
            try? client.write(fixLine(position))
            _ = client.readLine()
        }
        liveDone.signal()
    }.start()
    defer {
        live.store(false, ordering: .relaxed)
        liveDone.wait()
    }
    // Down long enough for the probes to settle at their interval, as after two hours.
    usleep(UInt32(downSeconds * 1_000_000))
    let before = proxy.counters
    let heldBefore = sink.fixTimes.count
    let linkUpMs = WallClock.nowMs()
    let linkUp = WallClock.monotonicNs()
    proxy.setMode(.pass)
    var firstAt: UInt64?
    var currentAt: UInt64?
    var drainedAt: UInt64?
    let deadline = linkUp + 1_200_000_000_000
    while drainedAt == nil, WallClock.monotonicNs() < deadline {
        let times = sink.fixTimes
        let newest = times.max() ?? 0
        let now = WallClock.monotonicNs()
        if firstAt == nil, times.count > heldBefore { firstAt = now }
        // The current position: a fix from no more than 20 s before link-up.
        if currentAt == nil, newest >= linkUpMs - 20_000 { currentAt = now }
        // Drained: nothing pending but the live fix of the moment.
        if times.count > heldBefore, pendingIsSmall(relay: relay) { drainedAt = now }
        usleep(200_000)
    }
    let after = proxy.counters
    let delivered = sink.fixTimes.count - heldBefore
    let up = after.bytesUp - before.bytesUp, down = after.bytesDown - before.bytesDown
    let rtt = 2 * Double(link.oneWayMs) / 1000
    let result = OutageResult(
        firstArrivalSeconds: Double((firstAt ?? deadline) - linkUp) / 1e9,
        currentSeconds: Double((currentAt ?? deadline) - linkUp) / 1e9,
        drainedSeconds: Double((drainedAt ?? deadline) - linkUp) / 1e9,
        delivered: delivered,
        bytesPerPosition: Double(up + down) / Double(max(1, delivered)),
        limitSeconds: Double(max(up, down)) / Double(link.bytesPerSecond) + 2 * rtt)
    note("satellite \(transport): \(history.count) fixes of history, \(delivered) delivered after link-up; up \(up) B, down \(down) B; " +
         "first position after \(String(format: "%.1f", result.firstArrivalSeconds)) s, current position after \(String(format: "%.1f", result.currentSeconds)) s, drained after \(String(format: "%.1f", result.drainedSeconds)) s, " +
         "limit \(String(format: "%.1f", result.limitSeconds)) s")
    if ProcessInfo.processInfo.environment["GEORELAY_BENCH_VERBOSE"] != nil, let log = relay.process?.stderrText() { note("relay log:\n\(log)") }
    return result
}

/// Whether the relay's status shows at most one position pending (the live fix in flight).
private func pendingIsSmall(relay: BenchRelay) -> Bool {
    guard let result = try? RelayProcess.command(["status", "--json", "--config", relay.configPath], directory: relay.directory.path),
          case .object(let status)? = try? JSONParser.parse(result.stdout),
          case .array(let destinations)? = status["destinations"] else { return false }
    return destinations.allSatisfy { destination in
        guard case .object(let fields) = destination, case .number(let pending)? = fields["pending"] else { return false }
        return pending <= 1
    }
}

private func fixLine(_ p: Position) -> String {
    #"{"time":\#(p.timeMs),"lat":\#(p.lat),"lon":\#(p.lon),"speed":\#(p.speed!),"course":\#(p.course!),"alt":\#(p.altitude!),"accuracy":\#(p.accuracy!)}"# + "\n"
}

/// A vessel under way at 5 m/s, one fix a second, the last one a second before `endingAtMs`.
private func vesselTrack(count: Int, endingAtMs: Int64) -> [Position] {
    var positions: [Position] = []
    var position = Position(device: "vessel", timeMs: endingAtMs - Int64(count) * 1000, lat: 59.9, lon: 10.7, speed: 5, course: 45, altitude: 12, accuracy: 4)
    for i in 0..<count {
        position = step(position, timeMs: endingAtMs - Int64(count - i) * 1000)
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
    next.lon = ((p.lon + 5 * seconds * sin(course * .pi / 180) / (111_320 * cos(p.lat * .pi / 180))) * 1e6).rounded() / 1e6
    next.course = (course.truncatingRemainder(dividingBy: 360) * 10).rounded() / 10
    return next
}

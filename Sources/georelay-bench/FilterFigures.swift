import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
import Glibc
import Synchronization

/// The `alarm` figure.
func alarmFigure() throws {
    // A 10,000-position backlog is draining to Traccar when an alarm arrives: time from its `ok` to the server's 2xx.
    let server = try FakeOsmAndServer()
    let port = server.http.port
    server.http.stop()
    defer { server.http.stop() }
    let directory = try TemporaryDirectory()
    let relay = try BenchRelay(directory: directory, destinationURL: "http://127.0.0.1:\(port)")
    try """
    { spool: { path: "\(directory.file("spool.db"))" }, ingest: { socket: "\(relay.socketPath)" },
      destinations: [{ url: "http://127.0.0.1:\(port)", filter: { mode: "all" }, backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 } }] }
    """.write(toFile: relay.configPath, atomically: true, encoding: .utf8)
    try relay.start()
    defer { relay.stop() }
    let client = try UnixLineClient(path: relay.socketPath)
    try client.write(#"{"hello":{"ack":true}}"# + "\n")
    _ = client.readLine()
    try client.write((0..<10_000).map { benchLine("boat", $0) }.joined())
    _ = client.readLines(10_000)
    try server.http.start(port: port)
    while server.requestCount < 500 { usleep(1_000) }
    let sentAt = WallClock.monotonicNs()
    try client.write(#"{"device":"boat","time":\#(1_700_000_000 + 10_000),"lat":59.5,"lon":10.5,"alarm":"sos"}"# + "\n")
    let reply = client.readLine() ?? ""
    let okAt = WallClock.monotonicNs()
    while !server.positions.contains(where: { $0.attributes["alarm"] == .string("sos") }) { usleep(200) }
    let deliveredAt = WallClock.monotonicNs()
    let backlogLeft = 10_000 - server.positions.filter { $0.attributes["alarm"] == nil }.count
    emit(
        "alarm_ok_to_server_ms",
        [
            ("value", .number((Double(deliveredAt - okAt) / 1e4).rounded() / 100)),
            ("ok_ms", .number((Double(okAt - sentAt) / 1e4).rounded() / 100)),
            ("reply", .string(reply)), ("backlog_waiting", .number(Double(backlogLeft))),
            ("target", .string("< 1000 with a 10,000 backlog")),
        ])
}

/// A realistic day at 1 Hz: 16 hours on a mooring (GPS jitter wandering 20-40 m around the
/// buoy) and 8 hours under way (about 5 m/s, slowly turning), generated with a fixed seed; fix
/// times from `startMs`. The `day` and `sea` figures' track.
func realisticDay(device: String = "boat", startMs: Int64 = 0) -> [Position] {
    var generator = SeededRandom(seed: 7)
    var day: [Position] = []
    let mooringLat = 59.9
    let mooringLon = 10.7
    var jitterNorth = 0.0
    var jitterEast = 0.0
    func moor(_ seconds: Range<Int>) {
        for second in seconds {
            // A bounded random walk: 20-40 m of wander, as a receiver on a mooring shows.
            jitterNorth = max(-40, min(40, jitterNorth * 0.995 + Double.random(in: -1.5...1.5, using: &generator)))
            jitterEast = max(-40, min(40, jitterEast * 0.995 + Double.random(in: -1.5...1.5, using: &generator)))
            day.append(
                Position(
                    device: device, timeMs: startMs + Int64(second) * 1000, lat: mooringLat + jitterNorth / 111_195,
                    lon: mooringLon + jitterEast / (111_195 * cos(mooringLat * .pi / 180)), speed: 0.1))
        }
    }
    moor(0..<(8 * 3600))
    var lat = mooringLat
    var lon = mooringLon
    var course = 200.0
    for second in (8 * 3600)..<(16 * 3600) {
        course += Double.random(in: -1.5...1.5, using: &generator)
        let speed = 5 + Double.random(in: -0.3...0.3, using: &generator)
        lat += speed * cos(course * .pi / 180) / 111_195
        lon += speed * sin(course * .pi / 180) / (111_195 * cos(lat * .pi / 180))
        day.append(
            Position(
                device: device, timeMs: startMs + Int64(second) * 1000, lat: lat, lon: lon, speed: speed, course: course
            ))
    }
    moor((16 * 3600)..<(24 * 3600))
    return day
}

/// The `day` figure.
func dayFigure() throws {
    let day = realisticDay()
    func count(_ settings: FilterSettings) -> (sent: Int, stops: Int) {
        let filter = LocationFilter(settings: settings)
        var state = FilterState()
        var sent = 0
        var stops = 0
        for p in day {
            let (decision, next) = filter.evaluate(p, state: state)
            state = next
            if case .send(let motion) = decision {
                sent += 1
                if motion == false { stops += 1 }
            }
        }
        return (sent, stops)
    }
    var push = FilterSettings()
    push.distanceMeters = 50
    var heartbeat = FilterSettings()
    heartbeat.heartbeatIntervalSeconds = 900
    let traccar = count(FilterSettings())
    let pushed = count(push)
    let beating = count(heartbeat)
    emit(
        "positions_sent_per_realistic_day",
        [
            ("produced", .number(Double(day.count))),
            ("traccar_defaults", .number(Double(traccar.sent))), ("traccar_stops", .number(Double(traccar.stops))),
            ("push_defaults", .number(Double(pushed.sent))),
            ("traccar_with_15min_heartbeat", .number(Double(beating.sent))),
        ])
}

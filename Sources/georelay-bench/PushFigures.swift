import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
import Glibc
import Synchronization

/// The `compression` figure: bytes per position and CPU per batch at each zstd level, for one
/// vessel's track at 1 Hz and for a fleet of 40 whose fixes interleave in a batch (what a fleet's
/// backlog sends), so the planner's levels can be chosen from both.
func compressionFigure() throws {
    var settings = Configuration.DestinationSettings()
    var push = PushSettings()
    push.username = "alice"
    settings.push = push
    let wire = PushProtocol(settings: settings)
    let track = movingBoatTrack(device: "gps-bow", count: 3600)
    let fleet = (0..<40).map {
        movingBoatTrack(device: String(format: "unit%02d", $0), count: 90, seed: 42 + UInt64($0))
    }
    let interleaved = (0..<90).flatMap { i in fleet.map { $0[i] } }
    let compressor = try ZstdCompressor()
    let levels = [3, 6, 7, 9, 12, 15, 16, 17, 19]
    for (name, positions) in [("vessel", track), ("fleet40", interleaved)] {
        let points = positions.map { wire.encodePoint($0) }
        for size in [100, 500] {
            var json = 0
            var gzip = 0
            var zstd: [Int: Int] = [:]
            var start = 0
            while start < points.count {
                let body = wire.encodeBatch(Array(points[start..<min(points.count, start + size)]))
                json += body.count
                gzip += try Gzip.compress(body).count
                for level in levels { zstd[level, default: 0] += try compressor.compress(body, level: level).count }
                start += size
            }
            note(
                "\(name), batch \(size): json \(json / points.count) B/pos, gzip \(gzip / points.count), "
                    + levels.map { "zstd\($0) \(String(format: "%.1f", Double(zstd[$0]!) / Double(points.count)))" }
                    .joined(separator: ", "))
        }
        let body = wire.encodeBatch(Array(points[0..<500]))
        note(
            "\(name): ms per 500-position batch (\(body.count) B of JSON): "
                + (try levels.map { level in
                    let rounds = level >= 16 ? 5 : 20
                    let t0 = WallClock.monotonicNs()
                    for _ in 0..<rounds { _ = try compressor.compress(body, level: level) }
                    return
                        "zstd\(level) \(String(format: "%.2f", Double(WallClock.monotonicNs() - t0) / Double(rounds) / 1e6))"
                }).joined(separator: ", "))
    }
    let t0 = WallClock.monotonicNs()
    for _ in 0..<20 { _ = track[0..<500].map { wire.encodePoint($0) } }
    note("json encoding: \(String(format: "%.2f", Double(WallClock.monotonicNs() - t0) / 20e6)) ms per 500 positions")
}

/// The `wire` figure.
func wireFigure() throws {
    let track = movingBoatTrack(device: "gps-bow", count: 3600)
    var fields: [(String, JSONValue)] = [("positions", .number(Double(track.count)))]
    do {
        let server = try FakeOsmAndServer()
        defer { server.http.stop() }
        let directory = try TemporaryDirectory()
        let perPosition = try wireBytesPerPosition(
            destination: { _ in #"{ url: "\#(server.url)", filter: { mode: "all" } }"# }, expected: track.count,
            delivered: { server.requestCount }, directory: directory, track: track)
        fields.append(("traccar", .number((perPosition * 10).rounded() / 10)))
    }
    // Push over a 256 kbit/s link (a satellite terminal's share), where the automatic zstd level
    // spends CPU to save bytes; and zstd over loopback, where it does not.
    for (compression, throttled) in [("none", true), ("gzip", true), ("zstd", true), ("zstd", false)] {
        let server = try FakePushServer()
        defer { server.http.stop() }
        let proxy = throttled ? try FaultProxy(targetPort: server.http.port, bytesPerSecond: 32_000) : nil
        defer { proxy?.stop() }
        let url = proxy.map { "http://127.0.0.1:\($0.port)/push" } ?? server.pushURL
        let directory = try TemporaryDirectory()
        setenv("GEORELAY_BENCH_API_KEY", server.expected.apiKey, 1)
        let perPosition = try wireBytesPerPosition(
            destination: { _ in
                """
                { type: "push", url: "\(url)", authBaseUrl: "\(server.authBaseURL)", registrationBaseUrl: "\(server.registrationBaseURL)",
                  apiKey: { env: "GEORELAY_BENCH_API_KEY" }, clientId: "\(server.expected.clientID)", tenant: "\(server.expected.tenant)",
                  username: "\(server.expected.username)", compression: "\(compression)", filter: { mode: "all" }, batch: { maxDelaySeconds: 0 }, timeoutSeconds: 120 }
                """
            }, expected: track.count, delivered: { server.points.count }, directory: directory, track: track)
        if !server.problems.isEmpty { note("push server problems: \(server.problems.prefix(3))") }
        fields.append(
            ("push_\(compression)\(throttled ? "_256kbit" : "_loopback")", .number((perPosition * 10).rounded() / 10)))
    }
    fields.append(("target", .string("push zstd (full batches) <= 16")))
    emit("wire_bytes_per_position", fields)
}

/// The `push-drain` figure.
func pushDrainFigure() throws {
    let count = quick ? 20_000 : 100_000
    let server = try FakePushServer()
    defer { server.http.stop() }
    setenv("GEORELAY_BENCH_API_KEY", server.expected.apiKey, 1)
    let directory = try TemporaryDirectory()
    let port = server.http.port
    server.http.stop()
    let level = ProcessInfo.processInfo.environment["GEORELAY_BENCH_ZSTD_LEVEL"].flatMap(Int.init)
    let destination = """
        { type: "push", url: "\(server.pushURL)", authBaseUrl: "\(server.authBaseURL)", registrationBaseUrl: "\(server.registrationBaseURL)",
          apiKey: { env: "GEORELAY_BENCH_API_KEY" }, clientId: "\(server.expected.clientID)", tenant: "\(server.expected.tenant)",
          username: "\(server.expected.username)", filter: { mode: "all" }, batch: { maxDelaySeconds: 0 }, backoff: { minSeconds: 0.2, maxSeconds: 1 },
          probe: { intervalSeconds: 1 } \(level.map { ", zstdLevel: \($0)" } ?? "") }
        """
    let relay = try BenchRelay(directory: directory, destinationURL: deadURL())
    try """
    { spool: { path: "\(directory.file("spool.db"))" }, ingest: { socket: "\(relay.socketPath)" }, destinations: [\(destination)] }
    """.write(toFile: relay.configPath, atomically: true, encoding: .utf8)
    // Fill while the server is down.
    try relay.start()
    let client = try UnixLineClient(path: relay.socketPath)
    try client.write(#"{"hello":{"ack":true}}"# + "\n")
    _ = client.readLine()
    let track = movingBoatTrack(device: "gps-bow", count: count)
    var written = 0
    while written < count {
        let n = min(50_000, count - written)
        try client.write(
            track[written..<(written + n)].map { p in
                #"{"device":"\#(p.device)","time":\#(p.timeMs),"lat":\#(p.lat),"lon":\#(p.lon),"speed":\#(p.speed!),"course":\#(p.course!),"alt":\#(p.altitude!),"accuracy":\#(p.accuracy!)}"#
                    + "\n"
            }.joined())
        _ = client.readLines(n)
        written += n
    }
    relay.stop()
    try server.http.start(port: port)
    let serverCPU = cpuSeconds(getpid())
    let started = WallClock.monotonicNs()
    try relay.start()
    // The drain is timed from the first batch's arrival (after start-up and authentication) to the last.
    var firstBatch: UInt64?
    var firstCount = 0
    while server.points.count < count {
        if firstBatch == nil, server.points.count > 0 {
            firstBatch = WallClock.monotonicNs()
            firstCount = server.points.count
        }
        usleep(1_000)
    }
    let finished = WallClock.monotonicNs()
    let seconds = Double(finished - started) / 1e9
    let drainSeconds = Double(finished - (firstBatch ?? started)) / 1e9
    note(
        "push drain: \(count) in \(String(format: "%.2f", seconds)) s from relay start; relay CPU \(String(format: "%.2f", cpuSeconds(relay.pid))) s, server CPU \(String(format: "%.2f", cpuSeconds(getpid()) - serverCPU)) s"
    )
    relay.stop()
    emit(
        "push_drain_positions_per_second",
        [
            ("value", .number((Double(count - firstCount) / drainSeconds).rounded())),
            ("including_startup_and_auth", .number((Double(count) / seconds).rounded())),
            ("positions", .number(Double(count))),
            ("zstd_level", level.map { .number(Double($0)) } ?? .string("auto")), ("target", .string(">= 200000")),
        ])
}

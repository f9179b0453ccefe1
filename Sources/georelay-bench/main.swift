import Foundation
import Glibc
import GeoRelayCore
import GeoRelaySpool
import GeoRelayForward
import GeoRelayTestKit
import Synchronization

// georelay-bench: the relay's figures against this machine's own limits,
// measured in the same run. One JSON line per figure on stdout.
// Usage: swift run -c release georelay-bench [--quick] [--only NAME]

#if DEBUG
FileHandle.standardError.write(Data("warning: georelay-bench built in debug mode; figures are meaningless. Use -c release.\n".utf8))
#endif

let arguments = CommandLine.arguments
let quick = arguments.contains("--quick")
let only = arguments.firstIndex(of: "--only").map { arguments[$0 + 1] }
let binDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent().path
setenv("GEORELAY_BIN", binDirectory + "/georelay", 1)

func emit(_ figure: String, _ fields: [(String, JSONValue)]) {
    FileHandle.standardOutput.write(Data((JSONValue.object(JSONObject([("figure", .string(figure))] + fields)).jsonText + "\n").utf8))
}

func note(_ text: String) {
    FileHandle.standardError.write(Data("bench: \(text)\n".utf8))
}

func benchLine(_ device: String, _ second: Int) -> String {
    #"{"device":"\#(device)","time":\#(1_700_000_000 + second),"lat":\#(59.0 + Double(second % 1000) * 1e-5),"lon":10.5,"speed":2.5,"course":90}"# + "\n"
}

/// A relay process on a fresh directory.
final class BenchRelay {
    let directory: TemporaryDirectory
    let configPath: String
    let socketPath: String
    var process: RelayProcess?

    init(directory: TemporaryDirectory? = nil, destinationURL: String, concurrency: Int = 4) throws {
        self.directory = try directory ?? TemporaryDirectory()
        configPath = self.directory.file("bench.json5")
        socketPath = self.directory.file("r.sock")
        try """
            { spool: { path: "\(self.directory.file("spool.db"))", maxBytes: 4294967296 },
              ingest: { socket: "\(socketPath)" },
              destinations: [{ url: "\(destinationURL)", concurrency: \(concurrency), backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 } }] }
            """.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    func start() throws {
        process = try RelayProcess(configPath: configPath, socketPath: socketPath, directory: directory.path, arguments: ["--log-level", "warning"])
    }

    func stop() {
        process?.signal(SIGTERM)
        process = nil
    }

    var pid: Int32 { process!.pid }
}

/// Peak resident set (VmHWM) and CPU seconds of a process, from /proc.
func peakRSSBytes(_ pid: Int32) -> Int {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return (Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0) * 1024
    }
    return 0
}

func cpuSeconds(_ pid: Int32) -> Double {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return 0 }
    let fields = text[text.index(after: close)...].split(separator: " ")
    let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
    return ((Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)) / ticks
}

/// A port nothing listens on: the relay's forwarder stays in backoff and costs nothing.
func deadURL() -> String { "http://127.0.0.1:9" }

// MARK: - Ingest throughput

func ingestThroughput() throws -> (rate: Double, groupSize: Double, rows: Int) {
    let relay = try BenchRelay(destinationURL: deadURL())
    try relay.start()
    let collectors = 8
    let perCollector = quick ? 20_000 : 100_000
    let payloads = (0..<collectors).map { c in Array((0..<perCollector).map { benchLine("c\(c)", $0) }.joined().utf8) }
    let clients = try (0..<collectors).map { _ in try UnixLineClient(path: relay.socketPath) }
    for client in clients {
        try client.write(#"{"hello":{"ack":true}}"# + "\n")
        _ = client.readLine()
    }
    let started = WallClock.monotonicNs()
    let done = DispatchGroup()
    let okCount = Atomic<Int>(0)
    for (index, client) in clients.enumerated() {
        let payload = payloads[index]
        Thread { try? client.write(payload) }.start()
        done.enter()
        Thread {
            var oks = 0
            for _ in 0..<perCollector {
                guard let reply = client.readLine() else { break }
                if reply.hasPrefix("ok ") { oks += 1 }
            }
            okCount.add(oks, ordering: .relaxed)
            done.leave()
        }.start()
    }
    done.wait()
    let seconds = Double(WallClock.monotonicNs() - started) / 1e9
    let total = okCount.load(ordering: .relaxed)
    relay.stop()
    let status = try SpoolReader.open(path: relay.directory.file("spool.db")).status()
    let commits = Double(status.counters["spool.commits"] ?? 1)
    let group = Double(status.counters["ingest.accepted"] ?? 0) / max(commits, 1)
    return (Double(total) / seconds, group, total)
}

/// The limit: the same rows inserted straight into SQLite with the spool's
/// settings (WAL, synchronous=FULL, same schema and indexes) in groups of the same size.
func sqliteLimit(rows: Int, groupSize: Int) throws -> Double {
    let directory = try TemporaryDirectory()
    let path = directory.file("limit.db")
    let spool = try Spool(settings: Spool.Settings(path: path))
    let positions = (0..<rows).map { (i: Int) -> Position in
        let timeMs = Int64(1_700_000_000 + i / 8) * 1000
        let lat = 59.0 + Double(i % 1000) * 1e-5
        return Position(device: "c\(i % 8)", timeMs: timeMs, lat: lat, lon: 10.5, speed: 2.5, course: 90)
    }
    return try spool.withWriterConnection { db in
        let insert = try db.statement(PositionRow.insertSQL)
        try db.execute("INSERT INTO devices(name) VALUES('c0'),('c1'),('c2'),('c3'),('c4'),('c5'),('c6'),('c7')")
        let started = WallClock.monotonicNs()
        var index = 0
        while index < positions.count {
            try db.execute("BEGIN IMMEDIATE")
            for p in positions[index..<min(positions.count, index + groupSize)] {
                PositionRow.bind(insert, deviceID: Int64(p.device.dropFirst())! + 1, position: p, receivedMs: p.timeMs)
                try insert.run()
            }
            try db.execute("COMMIT")
            index += groupSize
        }
        let seconds = Double(WallClock.monotonicNs() - started) / 1e9
        return Double(positions.count) / seconds
    }
}

// MARK: - Latency at a steady rate

func steadyLatency(rate: Int, seconds: Int) throws -> (p50: Double, p99: Double, max: Double) {
    let relay = try BenchRelay(destinationURL: deadURL())
    try relay.start()
    defer { relay.stop() }
    let client = try UnixLineClient(path: relay.socketPath)
    try client.write(#"{"hello":{"device":"steady","ack":true}}"# + "\n")
    _ = client.readLine()
    let count = rate * seconds
    let sent = UnsafeMutableBufferPointer<UInt64>.allocate(capacity: count)
    sent.initialize(repeating: 0)
    defer { sent.deallocate() }
    let sentBox = UnsafeSendable(sent)
    let intervalNs = UInt64(1_000_000_000 / rate)
    let start = WallClock.monotonicNs() + 10_000_000
    Thread {
        for i in 0..<count {
            let due = start + UInt64(i) * intervalNs
            while true {
                let now = WallClock.monotonicNs()
                if now >= due { break }
                let remaining = due - now
                if remaining > 200_000 { usleep(UInt32(remaining / 2000)) }
            }
            sentBox.value[i] = WallClock.monotonicNs()
            try? client.write(#"{"time":\#(1_700_000_000_000 + Int64(i)),"lat":59,"lon":10}"# + "\n")
        }
    }.start()
    var latencies: [Double] = []
    latencies.reserveCapacity(count)
    for i in 0..<count {
        guard client.readLine() != nil else { break }
        latencies.append(Double(WallClock.monotonicNs() - sentBox.value[i]) / 1e6)
    }
    latencies.sort()
    func percentile(_ p: Double) -> Double { latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
    return (percentile(0.50), percentile(0.99), latencies.last ?? 0)
}

struct UnsafeSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

// MARK: - Forward throughput

/// Fills a spool with `count` positions over `devices` devices while the destination is down.
func fillSpool(_ directory: TemporaryDirectory, count: Int, devices: Int, port: Int) throws {
    let relay = try BenchRelay(directory: directory, destinationURL: "http://127.0.0.1:\(port)")
    try relay.start()
    let perDevice = count / devices
    let clients = try (0..<devices).map { _ in try UnixLineClient(path: relay.socketPath) }
    let done = DispatchGroup()
    for (d, client) in clients.enumerated() {
        try client.write(#"{"hello":{"ack":true}}"# + "\n")
        _ = client.readLine()
        let chunk = 50_000
        done.enter()
        Thread {
            var written = 0
            while written < perDevice {
                let n = min(chunk, perDevice - written)
                try? client.write(Array((written..<(written + n)).map { benchLine("dev\(d)", $0) }.joined().utf8))
                _ = client.readLines(n)
                written += n
            }
            done.leave()
        }.start()
    }
    done.wait()
    relay.stop()
}

func forwardThroughput(count: Int) throws -> (rate: Double, peakRSS: Int, delivered: Int) {
    let server = try FakeOsmAndServer()
    let port = server.http.port
    server.http.stop()
    let directory = try TemporaryDirectory()
    try fillSpool(directory, count: count, devices: 8, port: port)
    try server.http.start(port: port)
    defer { server.http.stop() }
    let relay = try BenchRelay(directory: directory, destinationURL: "http://127.0.0.1:\(port)")
    let started = WallClock.monotonicNs()
    try relay.start()
    var peak = 0
    while server.requestCount < count {
        usleep(50_000)
        peak = max(peak, peakRSSBytes(relay.pid))
    }
    let seconds = Double(WallClock.monotonicNs() - started) / 1e9
    peak = max(peak, peakRSSBytes(relay.pid))
    note("forward: \(count) positions in \(String(format: "%.2f", seconds)) s; relay CPU \(String(format: "%.2f", cpuSeconds(relay.pid))) s, bench+server CPU \(String(format: "%.2f", cpuSeconds(getpid()))) s")
    relay.stop()
    return (Double(count) / seconds, peak, server.requestCount)
}

/// The limit: wrk's keep-alive POSTs of the same body to the same server.
func wrkLimit() throws -> Double? {
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/wrk") else {
        note("wrk not installed (apt-get install wrk); forward limit skipped")
        return nil
    }
    let server = try FakeOsmAndServer()
    defer { server.http.stop() }
    let directory = try TemporaryDirectory()
    let script = directory.file("post.lua")
    let body = OsmAndQuery.encode(Position(device: "dev0", timeMs: 1_700_000_000_000, lat: 59.00123, lon: 10.5, speed: 2.5, course: 90))
    try """
        wrk.method = "POST"
        wrk.body = "\(body)"
        wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
        """.write(toFile: script, atomically: true, encoding: .utf8)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/wrk")
    process.arguments = ["-t", "2", "-c", "4", "-d", quick ? "3s" : "10s", "-s", script, server.url + "/"]
    let out = Pipe()
    process.standardOutput = out
    try process.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    for line in text.split(separator: "\n") where line.hasPrefix("Requests/sec:") {
        return Double(line.split(separator: " ", omittingEmptySubsequences: true)[1])
    }
    return nil
}

// MARK: - Idle

func idleCPU(seconds: Int) throws -> Double {
    let relay = try BenchRelay(destinationURL: deadURL())
    try relay.start()
    defer { relay.stop() }
    let clients = try (0..<4).map { i -> UnixLineClient in
        let client = try UnixLineClient(path: relay.socketPath)
        try client.write(#"{"hello":{"device":"idle\#(i)","ack":true}}"# + "\n")
        _ = client.readLine()
        return client
    }
    // Let start-up and the first backoff settle, then measure.
    sleep(2)
    let before = cpuSeconds(relay.pid)
    sleep(UInt32(seconds))
    let used = cpuSeconds(relay.pid) - before
    _ = clients
    return used
}

// MARK: - Run

func want(_ name: String) -> Bool { only == nil || only == name }

note("machine: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory >> 30) GiB")
if want("ingest") {
    let ingest = try ingestThroughput()
    let limit = try sqliteLimit(rows: ingest.rows, groupSize: max(1, Int(ingest.groupSize.rounded())))
    emit("ingest_positions_per_second", [
        ("value", .number(ingest.rate.rounded())), ("limit_sqlite_same_groups", .number(limit.rounded())),
        ("ratio", .number((ingest.rate / limit * 1000).rounded() / 1000)), ("mean_group_size", .number(ingest.groupSize.rounded())),
        ("collectors", .number(8)), ("positions", .number(Double(ingest.rows))), ("target", .string(">= 0.5 of limit and >= 100000")),
    ])
}
if want("latency") {
    let latency = try steadyLatency(rate: 1000, seconds: quick ? 3 : 10)
    emit("ingest_ack_latency_ms_at_1000_per_second", [
        ("p50", .number((latency.p50 * 1000).rounded() / 1000)), ("p99", .number((latency.p99 * 1000).rounded() / 1000)),
        ("max", .number((latency.max * 1000).rounded() / 1000)), ("target", .string("p99 <= 10")),
    ])
}
if want("forward") {
    let limit = try wrkLimit()
    let forward = try forwardThroughput(count: quick ? 20_000 : 100_000)
    emit("forward_positions_per_second", [
        ("value", .number(forward.rate.rounded())), ("limit_wrk_requests_per_second", limit.map { .number($0.rounded()) } ?? .null),
        ("ratio", limit.map { .number((forward.rate / $0 * 1000).rounded() / 1000) } ?? .null),
        ("positions", .number(Double(forward.delivered))), ("target", .string(">= 0.5 of limit")),
    ])
}
if want("memory") {
    let count = quick ? 100_000 : 1_000_000
    let drain = try forwardThroughput(count: count)
    emit("drain_peak_rss_bytes", [
        ("value", .number(Double(drain.peakRSS))), ("positions", .number(Double(count))),
        ("drain_positions_per_second", .number(drain.rate.rounded())), ("target", .string("<= 52428800")),
    ])
}
if want("idle") {
    let seconds = quick ? 10 : 60
    let cpu = try idleCPU(seconds: seconds)
    emit("idle_cpu_seconds", [
        ("value", .number((cpu * 1000).rounded() / 1000)), ("window_seconds", .number(Double(seconds))),
        ("collectors", .number(4)), ("target", .string("about 0")),
    ])
}

// MARK: - Push: bytes per position and drain rate

/// A 1 Hz moving track of one boat: ~5 m/s, slowly turning, GPS-like precision and noise.
func movingBoatTrack(device: String, count: Int) -> [Position] {
    var generator = SplitMix(seed: 42)
    var lat = 59.9, lon = 10.7, course = 45.0
    return (0..<count).map { i in
        course += Double.random(in: -2...2, using: &generator)
        let speed = 5.0 + Double.random(in: -0.3...0.3, using: &generator)
        lat += speed * cos(course * .pi / 180) / 111_320
        lon += speed * sin(course * .pi / 180) / (111_320 * cos(lat * .pi / 180))
        func round(_ v: Double, _ digits: Double) -> Double { (v * digits).rounded() / digits }
        return Position(device: device, timeMs: 1_784_953_800_000 + Int64(i) * 1000,
                        lat: round(lat, 1e6), lon: round(lon, 1e6), speed: round(speed, 100), course: round(course.truncatingRemainder(dividingBy: 360), 10),
                        altitude: round(12 + Double.random(in: -1...1, using: &generator), 10), accuracy: round(3 + Double.random(in: 0...2, using: &generator), 10))
    }
}

struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

if want("compression") {
    var settings = Configuration.DestinationSettings()
    var push = PushSettings()
    push.username = "alice"
    settings.push = push
    let wire = PushProtocol(settings: settings)
    let track = movingBoatTrack(device: "gps-bow", count: 3600)
    let points = track.map { wire.encodePoint($0) }
    let compressor = try ZstdCompressor()
    for size in [100, 500] {
        var json = 0, gzip = 0
        var zstd: [Int: Int] = [:]
        var start = 0
        while start < points.count {
            let body = wire.encodeBatch(Array(points[start..<min(points.count, start + size)]))
            json += body.count
            gzip += try Gzip.compress(body).count
            for level in [3, 5, 6, 7, 8, 9, 12, 19] { zstd[level, default: 0] += try compressor.compress(body, level: level).count }
            start += size
        }
        note("batch \(size): json \(json / points.count) B/pos, gzip \(gzip / points.count), " + zstd.keys.sorted().map { "zstd\($0) \(String(format: "%.1f", Double(zstd[$0]!) / Double(points.count)))" }.joined(separator: ", "))
        if size == 500 {
            let body = wire.encodeBatch(Array(points[0..<500]))
            for level in [3, 5, 6, 7, 8, 9] {
                let t0 = WallClock.monotonicNs()
                for _ in 0..<20 { _ = try compressor.compress(body, level: level) }
                note("zstd\(level): \(String(format: "%.2f", Double(WallClock.monotonicNs() - t0) / 20e6)) ms per 500-position batch")
            }
            let t0 = WallClock.monotonicNs()
            for _ in 0..<20 { _ = track[0..<500].map { wire.encodePoint($0) } }
            note("json encoding: \(String(format: "%.2f", Double(WallClock.monotonicNs() - t0) / 20e6)) ms per 500 positions")
        }
    }
}

/// Wire bytes per position for one destination: a relay drains the track to a local server.
func wireBytesPerPosition(destination: (String) -> String, expected: Int, delivered: @escaping () -> Int, directory: TemporaryDirectory, track: [Position]) throws -> Double {
    let relay = try BenchRelay(directory: directory, destinationURL: deadURL())
    try """
        { spool: { path: "\(directory.file("spool.db"))" }, ingest: { socket: "\(relay.socketPath)" },
          destinations: [\(destination(directory.path))] }
        """.write(toFile: relay.configPath, atomically: true, encoding: .utf8)
    try relay.start()
    let client = try UnixLineClient(path: relay.socketPath)
    try client.write(#"{"hello":{"ack":true}}"# + "\n")
    _ = client.readLine()
    let lines = track.map { p in
        #"{"device":"\#(p.device)","time":\#(p.timeMs),"lat":\#(p.lat),"lon":\#(p.lon),"speed":\#(p.speed!),"course":\#(p.course!),"alt":\#(p.altitude!),"accuracy":\#(p.accuracy!)}"# + "\n"
    }
    try client.write(lines.joined())
    _ = client.readLines(lines.count)
    let deadline = Date().addingTimeInterval(120)
    while delivered() < expected, Date() < deadline { usleep(20_000) }
    usleep(300_000) // the last acknowledgements' commit
    relay.stop()
    let status = try SpoolReader.open(path: directory.file("spool.db")).status()
    let bytes = status.destinations.first?.wireBytes ?? 0
    return Double(bytes) / Double(expected)
}

if want("wire") {
    let track = movingBoatTrack(device: "gps-bow", count: 3600)
    var fields: [(String, JSONValue)] = [("positions", .number(Double(track.count)))]
    do {
        let server = try FakeOsmAndServer()
        defer { server.http.stop() }
        let directory = try TemporaryDirectory()
        let perPosition = try wireBytesPerPosition(destination: { _ in #"{ url: "\#(server.url)" }"# }, expected: track.count,
                                                   delivered: { server.requestCount }, directory: directory, track: track)
        fields.append(("traccar", .number((perPosition * 10).rounded() / 10)))
    }
    // Push over a 256 kbit/s link (a satellite terminal's share), where the automatic zstd level
    // spends CPU to save bytes; and zstd over loopback, where it does not.
    for (compression, throttled) in [("none", true), ("gzip", true), ("zstd", true), ("zstd", false)] {
        let server = try FakePushServer()
        defer { server.http.stop() }
        let proxy = throttled ? try ThrottledProxy(targetPort: server.http.port, bytesPerSecond: 32_000) : nil
        defer { proxy?.stop() }
        let url = proxy.map { "http://127.0.0.1:\($0.port)/push" } ?? server.pushURL
        let directory = try TemporaryDirectory()
        setenv("GEORELAY_BENCH_API_KEY", server.expected.apiKey, 1)
        let perPosition = try wireBytesPerPosition(destination: { _ in
            """
            { type: "push", url: "\(url)", authBaseUrl: "\(server.authBaseURL)", registrationBaseUrl: "\(server.registrationBaseURL)",
              apiKey: { env: "GEORELAY_BENCH_API_KEY" }, clientId: "\(server.expected.clientID)", tenant: "\(server.expected.tenant)",
              username: "\(server.expected.username)", compression: "\(compression)", batch: { maxDelaySeconds: 0 }, timeoutSeconds: 120 }
            """
        }, expected: track.count, delivered: { server.points.count }, directory: directory, track: track)
        if !server.problems.isEmpty { note("push server problems: \(server.problems.prefix(3))") }
        fields.append(("push_\(compression)\(throttled ? "_256kbit" : "_loopback")", .number((perPosition * 10).rounded() / 10)))
    }
    fields.append(("target", .string("push zstd (full batches) <= 16")))
    emit("wire_bytes_per_position", fields)
}

if want("push-drain") {
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
          username: "\(server.expected.username)", batch: { maxDelaySeconds: 0 }, backoff: { minSeconds: 0.2, maxSeconds: 1 },
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
        try client.write(track[written..<(written + n)].map { p in
            #"{"device":"\#(p.device)","time":\#(p.timeMs),"lat":\#(p.lat),"lon":\#(p.lon),"speed":\#(p.speed!),"course":\#(p.course!),"alt":\#(p.altitude!),"accuracy":\#(p.accuracy!)}"# + "\n"
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
    note("push drain: \(count) in \(String(format: "%.2f", seconds)) s from relay start; relay CPU \(String(format: "%.2f", cpuSeconds(relay.pid))) s, server CPU \(String(format: "%.2f", cpuSeconds(getpid()) - serverCPU)) s")
    relay.stop()
    emit("push_drain_positions_per_second", [
        ("value", .number((Double(count - firstCount) / drainSeconds).rounded())),
        ("including_startup_and_auth", .number((Double(count) / seconds).rounded())), ("positions", .number(Double(count))),
        ("zstd_level", level.map { .number(Double($0)) } ?? .string("auto")), ("target", .string(">= 200000")),
    ])
}

if want("alarm") {
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
    emit("alarm_ok_to_server_ms", [
        ("value", .number((Double(deliveredAt - okAt) / 1e4).rounded() / 100)), ("ok_ms", .number((Double(okAt - sentAt) / 1e4).rounded() / 100)),
        ("reply", .string(reply)), ("backlog_waiting", .number(Double(backlogLeft))), ("target", .string("< 1000 with a 10,000 backlog")),
    ])
}

if want("day") {
    // A realistic day at 1 Hz: 16 hours on a mooring (GPS jitter wandering 20-40 m around the buoy)
    // and 8 hours under way (about 5 m/s, slowly turning), generated with a fixed seed.
    var generator = SplitMix(seed: 7)
    var day: [Position] = []
    let mooringLat = 59.9, mooringLon = 10.7
    var jitterNorth = 0.0, jitterEast = 0.0
    func moor(_ seconds: Range<Int>) {
        for second in seconds {
            // A bounded random walk: 20-40 m of wander, as a receiver on a mooring shows.
            jitterNorth = max(-40, min(40, jitterNorth * 0.995 + Double.random(in: -1.5...1.5, using: &generator)))
            jitterEast = max(-40, min(40, jitterEast * 0.995 + Double.random(in: -1.5...1.5, using: &generator)))
            day.append(Position(device: "boat", timeMs: Int64(second) * 1000, lat: mooringLat + jitterNorth / 111_195,
                                lon: mooringLon + jitterEast / (111_195 * cos(mooringLat * .pi / 180)), speed: 0.1))
        }
    }
    moor(0..<(8 * 3600))
    var lat = mooringLat, lon = mooringLon, course = 200.0
    for second in (8 * 3600)..<(16 * 3600) {
        course += Double.random(in: -1.5...1.5, using: &generator)
        let speed = 5 + Double.random(in: -0.3...0.3, using: &generator)
        lat += speed * cos(course * .pi / 180) / 111_195
        lon += speed * sin(course * .pi / 180) / (111_195 * cos(lat * .pi / 180))
        day.append(Position(device: "boat", timeMs: Int64(second) * 1000, lat: lat, lon: lon, speed: speed, course: course))
    }
    moor((16 * 3600)..<(24 * 3600))
    func count(_ settings: FilterSettings) -> (sent: Int, stops: Int) {
        let filter = LocationFilter(settings: settings)
        var state = FilterState()
        var sent = 0, stops = 0
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
    let traccar = count(FilterSettings()), pushed = count(push), beating = count(heartbeat)
    emit("positions_sent_per_realistic_day", [
        ("produced", .number(Double(day.count))),
        ("traccar_defaults", .number(Double(traccar.sent))), ("traccar_stops", .number(Double(traccar.stops))),
        ("push_defaults", .number(Double(pushed.sent))),
        ("traccar_with_15min_heartbeat", .number(Double(beating.sent))),
    ])
}

if want("nmea") {
    // A real receiver log replayed through the socket as fast as the relay answers, acks on.
    let log = SharedTestData.nmea.appendingPathComponent("telit-he910.log")
    if let data = try? Data(contentsOf: log) {
        let lines = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).filter { $0.hasPrefix("$") }.map(String.init)
        let relay = try BenchRelay(destinationURL: deadURL())
        try relay.start()
        let client = try UnixLineClient(path: relay.socketPath)
        try client.write(#"{"hello":{"device":"telit","ack":true}}"# + "\n")
        _ = client.readLine()
        // The log over and over, each pass a day later so every fix is new.
        var payload: [String] = []
        for pass in 0..<(quick ? 20 : 100) {
            for line in lines {
                guard line.contains("RMC,"), var sentence = try? NMEASentence.parse(line), sentence.fields.count > 8,
                      let date = sentence.field(8), date.count == 6, let day = Int(date.prefix(2)) else { payload.append(line); continue }
                sentence.fields[8] = Substring(String(format: "%02d", (day + pass) % 28 + 1) + date.dropFirst(2))
                let body = "\(sentence.talker)\(sentence.type)," + sentence.fields.joined(separator: ",")
                payload.append("$" + body + "*" + String(format: "%02X", body.utf8.reduce(UInt8(0)) { $0 ^ $1 }))
            }
        }
        let text = payload.map { $0 + "\r\n" }.joined()
        let started = WallClock.monotonicNs()
        Thread { try? client.write(text) }.start()
        _ = client.readLines(payload.count)
        let seconds = Double(WallClock.monotonicNs() - started) / 1e9
        relay.stop()
        emit("nmea_lines_per_second", [("value", .number((Double(payload.count) / seconds).rounded())), ("lines", .number(Double(payload.count))),
                                       ("log", .string("telit-he910.log"))])
    } else {
        note("../shared/testdata/nmea is absent: nmea figure skipped")
    }
    // A collector's CPU for one 1 Hz receiver (a TCP multiplexer sending one RMC+GGA cycle a second).
    let relay = try BenchRelay(destinationURL: deadURL())
    try relay.start()
    let mux = try LineServer()
    let collector = Process()
    collector.executableURL = URL(fileURLWithPath: binDirectory + "/georelay")
    collector.arguments = ["collect", "--device", "bow", "--tcp", "127.0.0.1:\(mux.port)", "--socket", relay.socketPath, "--log-level", "warning"]
    collector.standardError = FileHandle.nullDevice
    try collector.run()
    let seconds = quick ? 10 : 30
    _ = await mux.waitForClient()
    let before = cpuSeconds(collector.processIdentifier)
    for second in 0..<seconds {
        func sentence(_ body: String) -> String { "$" + body + "*" + String(format: "%02X", body.utf8.reduce(UInt8(0)) { $0 ^ $1 }) }
        let time = String(format: "12%02d%02d.00", second / 60, second % 60)
        mux.send([sentence("GPRMC,\(time),A,5930.000,N,01042.000,E,005.0,090.0,250726,,,A"),
                  sentence("GPGGA,\(time),5930.000,N,01042.000,E,1,09,0.8,12.0,M,20.0,M,,"),
                  sentence("GPGSV,1,1,01,01,40,083,46")])
        usleep(1_000_000)
    }
    let used = cpuSeconds(collector.processIdentifier) - before
    collector.terminate()
    collector.waitUntilExit()
    mux.stop()
    relay.stop()
    emit("collector_cpu_percent_per_1hz_receiver", [("value", .number((used / Double(seconds) * 100 * 1000).rounded() / 1000)),
                                                    ("window_seconds", .number(Double(seconds))), ("target", .string("a handful together < 1"))])
}

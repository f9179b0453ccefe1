import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
import Glibc
import Synchronization

func emit(_ figure: String, _ fields: [(String, JSONValue)]) {
    FileHandle.standardOutput.write(
        Data((JSONValue.object(JSONObject([("figure", .string(figure))] + fields)).jsonText + "\n").utf8))
}

func note(_ text: String) {
    FileHandle.standardError.write(Data("bench: \(text)\n".utf8))
}

func benchLine(_ device: String, _ second: Int) -> String {
    #"{"device":"\#(device)","time":\#(1_700_000_000 + second),"lat":\#(59.0 + Double(second % 1000) * 1e-5),"lon":10.5,"speed":2.5,"course":90}"#
        + "\n"
}

/// A relay process on a fresh directory.
final class BenchRelay {
    let directory: TemporaryDirectory
    let configPath: String
    let socketPath: String
    var process: RelayProcess?

    /// - Parameters:
    ///   - destinationKeys: more keys of the destination (`protocol: "teltonika", ` for its port).
    ///   - topLevel: more top-level keys (`devices: […], `).
    init(
        directory: TemporaryDirectory? = nil, destinationURL: String, concurrency: Int = 4, pipeline: Int? = nil,
        destinationKeys: String = "", topLevel: String = ""
    ) throws {
        self.directory = try directory ?? TemporaryDirectory()
        configPath = self.directory.file("bench.json5")
        socketPath = self.directory.file("r.sock")
        try """
        { \(topLevel)spool: { path: "\(self.directory.file("spool.db"))", maxBytes: 4294967296 },
          ingest: { socket: "\(socketPath)" },
          destinations: [{ url: "\(destinationURL)", concurrency: \(concurrency), \(pipeline.map { "pipeline: \($0), " } ?? "")\(destinationKeys)filter: { mode: "all" },
                           backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 } }] }
        """.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    /// - Parameter lab: runs the relay in the lab's relay-side namespace.
    func start(lab: NetworkLab? = nil) throws {
        process = try RelayProcess(
            configPath: configPath, socketPath: socketPath, directory: directory.path,
            arguments: ["--log-level", ProcessInfo.processInfo.environment["GEORELAY_BENCH_LOG_LEVEL"] ?? "warning"],
            lab: lab)
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
        let close = text.lastIndex(of: ")")
    else { return 0 }
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
/// settings (WAL, synchronous=FULL, same schema and indexes) in groups of the same size,
/// merged from `recent` into `positions` as often as the writer does.
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
        var unmerged = 0
        let slots = RecentPositions.newSpoolSlots
        while index < positions.count {
            try db.execute("BEGIN IMMEDIATE")
            for (offset, p) in positions[index..<min(positions.count, index + groupSize)].enumerated() {
                // The writer's bulk merge into the indexed table, when the ring is full.
                if unmerged == slots {
                    _ = try RecentPositions.merge(db: db)
                    unmerged = 0
                }
                let seq = Int64(index + offset + 1)
                PositionRow.bind(
                    insert, seq: seq, slot: seq % Int64(slots), deviceID: Int64(p.device.dropFirst())! + 1, position: p,
                    receivedMs: p.timeMs)
                try insert.run()
                unmerged += 1
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

/// A fake Traccar on a port of its own, and a spool of `count` positions for it filled while it
/// was down, so that nothing has drained yet: where the drain figures start.
func spooledForOsmAnd(count: Int, devices: Int) throws -> (server: FakeOsmAndServer, directory: TemporaryDirectory) {
    let server = try FakeOsmAndServer()
    let port = server.http.port
    server.http.stop()
    let directory = try TemporaryDirectory()
    try fillSpool(directory, count: count, devices: devices, port: port)
    try server.http.start(port: port)
    return (server, directory)
}

func forwardThroughput(count: Int, pipeline: Int? = nil) throws -> (
    rate: Double, peakRSS: Int, delivered: Int, relayCPUSeconds: Double
) {
    let (server, directory) = try spooledForOsmAnd(count: count, devices: 8)
    defer { server.http.stop() }
    let relay = try BenchRelay(
        directory: directory, destinationURL: "http://127.0.0.1:\(server.http.port)", pipeline: pipeline)
    let started = WallClock.monotonicNs()
    try relay.start()
    var peak = 0
    while server.requestCount < count {
        usleep(50_000)
        peak = max(peak, peakRSSBytes(relay.pid))
    }
    let seconds = Double(WallClock.monotonicNs() - started) / 1e9
    peak = max(peak, peakRSSBytes(relay.pid))
    let relayCPU = cpuSeconds(relay.pid)
    note(
        "forward (pipeline \(pipeline.map(String.init) ?? "default")): \(count) positions in \(String(format: "%.2f", seconds)) s; relay CPU \(String(format: "%.2f", relayCPU)) s, bench+server CPU \(String(format: "%.2f", cpuSeconds(getpid()))) s"
    )
    relay.stop()
    return (Double(count) / seconds, peak, server.requestCount, relayCPU)
}

/// The spool of `forwardThroughput` drained to Traccar's Teltonika port (the fake), for the relay's CPU per position.
func teltonikaForwardThroughput(count: Int) throws -> (rate: Double, delivered: Int, relayCPUSeconds: Double) {
    let server = try FakeTeltonikaServer()
    let port = server.port
    server.stop()
    let directory = try TemporaryDirectory()
    try fillSpool(directory, count: count, devices: 8, port: port)
    try server.start(port: port)
    defer { server.stop() }
    let relay = try BenchRelay(
        directory: directory, destinationURL: "tcp://127.0.0.1:\(port)", destinationKeys: #"protocol: "teltonika", "#)
    let started = WallClock.monotonicNs()
    try relay.start()
    while server.positions.count < count { usleep(50_000) }
    let seconds = Double(WallClock.monotonicNs() - started) / 1e9
    let relayCPU = cpuSeconds(relay.pid)
    note(
        "forward (teltonika): \(count) positions in \(String(format: "%.2f", seconds)) s; relay CPU \(String(format: "%.2f", relayCPU)) s"
    )
    relay.stop()
    return (Double(count) / seconds, server.positions.count, relayCPU)
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
    let body = OsmAndQuery.encode(
        Position(device: "dev0", timeMs: 1_700_000_000_000, lat: 59.00123, lon: 10.5, speed: 2.5, course: 90))
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

// MARK: - Push: bytes per position and drain rate

/// A 1 Hz moving track of one boat: ~5 m/s, slowly turning, GPS-like precision and noise.
func movingBoatTrack(device: String, count: Int, seed: UInt64 = 42) -> [Position] {
    var generator = SeededRandom(seed: seed)
    var lat = 59.9 + Double(seed - 42) * 0.01
    var lon = 10.7
    var course = 45.0 + Double(seed - 42) * 7
    return (0..<count).map { i in
        course += Double.random(in: -2...2, using: &generator)
        let speed = 5.0 + Double.random(in: -0.3...0.3, using: &generator)
        lat += speed * cos(course * .pi / 180) / 111_320
        lon += speed * sin(course * .pi / 180) / (111_320 * cos(lat * .pi / 180))
        func round(_ v: Double, _ digits: Double) -> Double { (v * digits).rounded() / digits }
        return Position(
            device: device, timeMs: 1_784_953_800_000 + Int64(i) * 1000,
            lat: round(lat, 1e6), lon: round(lon, 1e6), speed: round(speed, 100),
            course: round(course.truncatingRemainder(dividingBy: 360), 10),
            altitude: round(12 + Double.random(in: -1...1, using: &generator), 10),
            accuracy: round(3 + Double.random(in: 0...2, using: &generator), 10))
    }
}

/// Wire bytes per position for one destination: a relay drains the track to a local server.
func wireBytesPerPosition(
    destination: (String) -> String, expected: Int, delivered: @escaping () -> Int, directory: TemporaryDirectory,
    track: [Position]
) throws -> Double {
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
        #"{"device":"\#(p.device)","time":\#(p.timeMs),"lat":\#(p.lat),"lon":\#(p.lon),"speed":\#(p.speed!),"course":\#(p.course!),"alt":\#(p.altitude!),"accuracy":\#(p.accuracy!)}"#
            + "\n"
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

/// A figure that cannot be measured as asked, with why.
struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

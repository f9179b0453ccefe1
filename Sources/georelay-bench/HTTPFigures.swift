import Foundation
import GeoRelayCore
import GeoRelayTestKit
import Glibc

/// The `http` figure: the relay's own HTTP ports (phones, metrics) under wrk, the relay's
/// memory, and how long a phone waits for its answer while 1,000 idle connections are open
/// (a buggy app, a port scanner) — the case the thread-per-connection listener reset phones in.
func httpFigure() throws {
    let phonePort = try freeTCPPort()
    let metricsPort = try freeTCPPort()
    let relay = try BenchRelay(destinationURL: deadURL())
    try """
    { spool: { path: "\(relay.directory.file("spool.db"))", maxBytes: 4294967296 },
      ingest: { socket: "\(relay.socketPath)", http: { listen: "127.0.0.1:\(phonePort)" } },
      metrics: { listen: "127.0.0.1:\(metricsPort)" },
      destinations: [{ url: "\(deadURL())", filter: { mode: "all" }, backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 } }] }
    """.write(toFile: relay.configPath, atomically: true, encoding: .utf8)
    try relay.start()
    defer { relay.stop() }
    try awaitListening(port: phonePort)
    try awaitListening(port: metricsPort)
    let seconds = quick ? 3 : 10

    let healthz = try wrk(
        url: "http://127.0.0.1:\(metricsPort)/healthz", seconds: seconds, connections: 8, script: nil,
        directory: relay.directory)
    let body = "id=bench&timestamp=1784953800&lat=59.5&lon=10.5&speed=3"
    let phones = try wrk(
        url: "http://127.0.0.1:\(phonePort)/", seconds: seconds, connections: 8,
        script: """
            wrk.method = "POST"
            wrk.body = "\(body)"
            wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
            """, directory: relay.directory)
    let rssAfterWrk = currentRSSBytes(relay.pid)

    // 1,000 idle connections, then phones one after another on fresh connections.
    let idle = (0..<1000).compactMap { _ in try? TCPTestClient(port: phonePort, receiveTimeout: .seconds(5)) }
    var latencies: [Double] = []
    var unanswered = 0
    for second in 0..<20 {
        let phone = try TCPTestClient(port: phonePort, receiveTimeout: .seconds(5))
        let start = ContinuousClock.now
        let outcome = phone.exchange(
            TCPTestClient.phoneRequest(device: "bench-phone", second: second, keepAlive: false))
        if outcome.status == 200 {
            latencies.append((ContinuousClock.now - start).seconds * 1000)
        } else {
            unanswered += 1
        }
    }
    let rssWithIdle = currentRSSBytes(relay.pid)
    withExtendedLifetime(idle) {}
    latencies.sort()
    note(
        "http: healthz \(healthz.map { String(Int($0)) } ?? "-") req/s, phone POST \(phones.map { String(Int($0)) } ?? "-") req/s; "
            + "with \(idle.count) idle connections \(latencies.count)/20 phones answered, median \(latencies.isEmpty ? "-" : String(format: "%.1f ms", latencies[latencies.count / 2]))"
    )
    emit(
        "http_listener",
        [
            ("healthz_requests_per_second", healthz.map { .number($0.rounded()) } ?? .null),
            ("phone_post_requests_per_second", phones.map { .number($0.rounded()) } ?? .null),
            ("rss_mib_after_wrk", .number((Double(rssAfterWrk) / 1_048_576 * 10).rounded() / 10)),
            ("idle_connections_open", .number(Double(idle.count))),
            ("phones_answered_of_20_with_idle", .number(Double(latencies.count))),
            (
                "phone_ms_median_with_idle",
                latencies.isEmpty ? .null : .number((latencies[latencies.count / 2] * 10).rounded() / 10)
            ),
            ("phone_ms_max_with_idle", latencies.last.map { .number(($0 * 10).rounded() / 10) } ?? .null),
            ("rss_mib_with_idle", .number((Double(rssWithIdle) / 1_048_576 * 10).rounded() / 10)),
            ("target", .string("every phone answered within 1000 ms with 1000 idle connections")),
        ])
}

/// wrk's requests per second against `url` (keep-alive, 2 threads), nil without wrk.
private func wrk(url: String, seconds: Int, connections: Int, script: String?, directory: TemporaryDirectory) throws
    -> Double?
{
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/wrk") else {
        note("wrk not installed (apt-get install wrk); http rates skipped")
        return nil
    }
    var arguments = ["-t", "2", "-c", "\(connections)", "-d", "\(seconds)s"]
    if let script {
        let path = directory.file("wrk-\(UUID().uuidString.prefix(6)).lua")
        try script.write(toFile: path, atomically: true, encoding: .utf8)
        arguments += ["-s", path]
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/wrk")
    process.arguments = arguments + [url]
    let out = Pipe()
    process.standardOutput = out
    try process.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    if text.contains("Non-2xx") || text.contains("Socket errors") {
        note(
            "wrk \(url): \(text.split(separator: "\n").filter { $0.contains("Non-2xx") || $0.contains("Socket errors") }.joined(separator: "; "))"
        )
    }
    for line in text.split(separator: "\n") where line.hasPrefix("Requests/sec:") {
        return Double(line.split(separator: " ", omittingEmptySubsequences: true)[1])
    }
    return nil
}

/// A port the kernel just handed out (bound and released; the relay binds it next).
private func freeTCPPort() throws -> Int {
    let socket = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0)
    try socket.descriptor.close()
    return socket.port
}

/// Waits until something accepts on `port`: the relay binds its HTTP ports just after its socket.
private func awaitListening(port: Int) throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < deadline {
        if let socket = IPv4Socket.connect(host: "127.0.0.1", port: port) {
            try? socket.close()
            return
        }
        usleep(20_000) // a child process binding: no event to await
    }
    throw RelayProcessError(message: "nothing listened on 127.0.0.1:\(port) within 10 s")
}

/// The resident set now (VmRSS), from /proc.
private func currentRSSBytes(_ pid: Int32) -> Int {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return (Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0) * 1024
    }
    return 0
}

extension Duration {
    fileprivate var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import Glibc

/// The `flash` figure: bytes the relay makes the kernel write to storage per stored position,
/// the SD card's wear, on a vessel's normal day (4 GPS units at 1 Hz, a Traccar and a push
/// destination both up, default filters) and in a 1,000 positions/s burst; beside the
/// positions' own bytes (the floor) and the ack latency the commit window costs.
///
/// The count is `/proc/<pid>/io` `write_bytes` of the relay over the window, plus what a
/// checkpoint run by the bench afterwards writes (the WAL's pages still owed to the database
/// file), so a relay that merely postpones its checkpoints gets no credit for it.
func flashFigure() throws {
    // Long enough for the writer to merge `recent` into `positions` once at its default
    // interval (300 s): a shorter window would leave that cost out. `--quick` does.
    let seconds = quick ? 20 : 330
    let normal = try flashRun(devices: 4, ratePerDevice: 1, seconds: seconds)
    emit(
        "flash_bytes_written_per_position_4x1hz",
        [
            ("value", .number(normal.bytesPerPosition.rounded())),
            ("floor_position_bytes", .number(normal.floorBytes.rounded())),
            ("relay_write_bytes", .number(Double(normal.relayBytes))),
            ("checkpoint_bytes", .number(Double(normal.checkpointBytes))),
            ("positions", .number(Double(normal.positions))), ("merges", .number(Double(normal.merges))),
            ("delivered_traccar", .number(Double(normal.deliveredTraccar))),
            ("delivered_push", .number(Double(normal.deliveredPush))),
            ("ack_p50_ms", .number(normal.p50.rounded())), ("ack_p99_ms", .number(normal.p99.rounded())),
            ("bytes_per_day_at_this_rate", .number((normal.bytesPerPosition * 4 * 86_400).rounded())),
            ("target", .string("<= 2048 bytes/position, ack p99 <= 1000 ms")),
        ])
    let burst = try flashRun(devices: 4, ratePerDevice: 250, seconds: quick ? 5 : 10)
    emit(
        "flash_bytes_written_per_position_burst_1000_per_second",
        [
            ("value", .number(burst.bytesPerPosition.rounded())),
            ("floor_position_bytes", .number(burst.floorBytes.rounded())),
            ("positions", .number(Double(burst.positions))), ("ack_p50_ms", .number(burst.p50.rounded())),
            ("ack_p99_ms", .number(burst.p99.rounded())),
            ("target", .string("as measured")),
        ])
}

struct FlashResult {
    var relayBytes: Int
    var checkpointBytes: Int
    var positions: Int
    var floorBytes: Double
    var p50: Double
    var p99: Double
    var deliveredTraccar: Int
    var deliveredPush: Int
    /// Merges of `recent` into `positions` in the window (the relay's `spool.merges` counter).
    var merges: Int
    var bytesPerPosition: Double { Double(relayBytes + checkpointBytes) / Double(max(1, positions)) }
}

/// `write_bytes` of a process: bytes it caused to be sent to the storage layer.
func writeBytes(_ pid: Int32) -> Int {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("write_bytes:") {
        return Int(line.split(separator: " ").last ?? "") ?? 0
    }
    return 0
}

private func flashRun(devices: Int, ratePerDevice: Int, seconds: Int) throws -> FlashResult {
    let osmand = try FakeOsmAndServer()
    defer { osmand.http.stop() }
    let push = try FakePushServer()
    defer { push.http.stop() }
    setenv("GEORELAY_BENCH_API_KEY", push.expected.apiKey, 1)
    let directory = try TemporaryDirectory()
    let relay = try BenchRelay(directory: directory, destinationURL: deadURL())
    try """
    { spool: { path: "\(directory.file("spool.db"))" }, ingest: { socket: "\(relay.socketPath)" },
      destinations: [
        { name: "traccar", url: "http://127.0.0.1:\(osmand.http.port)" },
        { name: "push", type: "push", url: "\(push.pushURL)", authBaseUrl: "\(push.authBaseURL)", registrationBaseUrl: "\(push.registrationBaseURL)",
          apiKey: { env: "GEORELAY_BENCH_API_KEY" }, clientId: "\(push.expected.clientID)", tenant: "\(push.expected.tenant)",
          username: "\(push.expected.username)" } ] }
    """.write(toFile: relay.configPath, atomically: true, encoding: .utf8)
    try relay.start()
    defer { relay.stop() }
    let tracks = (0..<devices).map { movingBoatTrack(device: "vessel-gps\($0)", count: seconds * ratePerDevice + 64) }
    let clients = try (0..<devices).map { _ in try UnixLineClient(path: relay.socketPath) }
    for client in clients {
        try client.write(#"{"hello":{"ack":true}}"# + "\n")
        _ = client.readLine()
    }
    @Sendable func line(_ p: Position, timeMs: Int64) -> String {
        #"{"device":"\#(p.device)","time":\#(timeMs),"lat":\#(p.lat),"lon":\#(p.lon),"speed":\#(p.speed!),"course":\#(p.course!),"alt":\#(p.altitude!),"accuracy":\#(p.accuracy!)}"#
            + "\n"
    }
    // Warm up: the first positions create devices, filter state and the push token.
    let warmUp = 8
    let nowMs = WallClock.nowMs() - Int64(seconds * 1000) - 60_000
    for (d, client) in clients.enumerated() {
        for i in 0..<warmUp {
            try client.write(line(tracks[d][i], timeMs: nowMs + Int64(i) * 1000 / Int64(ratePerDevice)))
        }
        _ = client.readLines(warmUp)
    }
    let warmed = Date().addingTimeInterval(30)
    while osmand.requestCount < devices || push.points.count < devices, Date() < warmed { usleep(50_000) }
    usleep(1_500_000)

    let before = writeBytes(relay.pid)
    let perDevice = seconds * ratePerDevice
    let intervalNs = UInt64(1_000_000_000 / ratePerDevice)
    let start = WallClock.monotonicNs() + 20_000_000
    let collected = Collected()
    let done = DispatchGroup()
    for (d, client) in clients.enumerated() {
        done.enter()
        let track = tracks[d]
        let box = UnsafeSendable(client)
        Thread {
            let client = box.value
            // Each unit sends on its own phase, as unsynchronised receivers do.
            let phase = UInt64(d) * intervalNs / UInt64(devices)
            var mine: [Double] = []
            var bytes = 0
            // A burst comes from collectors emptying a buffer: lines in chunks of a tenth of a
            // second, answers read after each chunk. At 1 Hz every line waits for its answer.
            let chunk = max(1, ratePerDevice / 10)
            for i in stride(from: 0, to: perDevice, by: chunk) {
                let due = start + phase + UInt64(i) * intervalNs
                while case let now = WallClock.monotonicNs(), now < due {
                    if due - now > 200_000 { usleep(UInt32(min((due - now) / 2000, 100_000))) }
                }
                let n = min(chunk, perDevice - i)
                let text = (i..<(i + n)).map {
                    line(track[warmUp + $0], timeMs: nowMs + Int64(warmUp + $0) * 1000 / Int64(ratePerDevice))
                }.joined()
                bytes += text.utf8.count
                let sent = WallClock.monotonicNs()
                try? client.write(text)
                var answered = 0
                while answered < n, client.readLine() != nil {
                    answered += 1
                    mine.append(Double(WallClock.monotonicNs() - sent) / 1e6)
                }
                if answered < n { break }
            }
            collected.add(latencies: mine, bytes: bytes)
            done.leave()
        }.start()
    }
    done.wait()
    // Let the destinations settle what the window stored (their acknowledgements are written
    // within stateSyncSeconds), then count.
    let drained = Date().addingTimeInterval(60)
    var merges = 0
    while Date() < drained {
        if let status = try? SpoolReader.open(path: directory.file("spool.db")).status(),
            status.destinations.allSatisfy({ $0.pending == 0 })
        {
            merges = Int(status.counters["spool.merges"] ?? 0)
            break
        }
        usleep(200_000)
    }
    if Date() >= drained { note("flash: the destinations still had positions pending after 60 s") }
    let relayBytes = writeBytes(relay.pid) - before
    // What the WAL still owes the database file, written by a checkpoint from here.
    let ownBefore = writeBytes(getpid())
    let db = try SQLiteDatabase(path: directory.file("spool.db"))
    _ = try db.pragma("wal_checkpoint(PASSIVE)")
    let checkpointBytes = writeBytes(getpid()) - ownBefore
    if ProcessInfo.processInfo.environment["GEORELAY_BENCH_VERBOSE"] != nil, let log = relay.process?.stderrText() {
        note("relay log:\n\(log)")
    }
    let sorted = collected.latencies.sorted()
    func percentile(_ p: Double) -> Double {
        sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }
    let positions = sorted.count
    note(
        "flash \(devices)x\(ratePerDevice)/s for \(seconds) s: \(positions) positions, relay wrote \(relayBytes) B, checkpoint \(checkpointBytes) B; traccar \(osmand.requestCount), push \(push.points.count)"
    )
    return FlashResult(
        relayBytes: relayBytes, checkpointBytes: checkpointBytes, positions: positions,
        floorBytes: Double(collected.bytes) / Double(max(1, positions)),
        p50: percentile(0.5), p99: percentile(0.99), deliveredTraccar: osmand.requestCount,
        deliveredPush: push.points.count,
        merges: merges)
}

/// What the collector threads measured.
private final class Collected: @unchecked Sendable {
    private let lock = NSLock()
    private var _latencies: [Double] = []
    private var _bytes = 0

    func add(latencies: [Double], bytes: Int) {
        lock.withLock {
            _latencies += latencies
            _bytes += bytes
        }
    }

    var latencies: [Double] { lock.withLock { _latencies } }
    var bytes: Int { lock.withLock { _bytes } }
}

import Foundation
import GeoRelayCore
import GeoRelayService
import GeoRelaySpool
import GeoRelayTestKit
import Glibc

/// The `status` figure: what one refresh of the relay's status costs (the status page's JSON,
/// `/metrics` and `georelay status` all read it) with ten million positions waiting, against
/// the same with a thousand in the same run. A page polling every few seconds, or Prometheus
/// scraping, must not keep a core busy on a long backlog.
func statusFigure() throws {
    let large = quick ? 1_000_000 : 10_000_000
    let small = try statusRun(rows: 1_000)
    let big = try statusRun(rows: large)
    emit(
        "status_refresh_ms_at_\(large / 1_000_000)m_pending",
        [
            ("value", .number(big.page.p50)), ("p99_ms", .number(big.page.p99)),
            ("at_1000_rows_ms", .number(small.page.p50)),
            ("spool_status_ms", .number(big.read.p50)), ("spool_status_at_1000_rows_ms", .number(small.read.p50)),
            ("command_ms", .number(big.command)), ("command_at_1000_rows_ms", .number(small.command)),
            ("pending", .number(Double(big.pending))), ("spool_bytes", .number(Double(big.spoolBytes))),
            ("target", .string("the page's refresh <= 50 ms at 10 million pending, about the same as at 1,000")),
        ])
}

private struct StatusRun {
    /// `/status.json` as the page gets it: the whole report, tracks through its cache.
    var page: (p50: Double, p99: Double)
    /// `SpoolReader.status()` alone.
    var read: (p50: Double, p99: Double)
    /// `georelay status --json`, process start included, median of 5.
    var command: Double
    var pending: Int
    var spoolBytes: Int
}

private func statusRun(rows: Int) throws -> StatusRun {
    let directory = try TemporaryDirectory()
    // The relay registers its destination (nothing listens there: everything stays pending).
    let relay = try BenchRelay(directory: directory, destinationURL: deadURL())
    try relay.start()
    let spoolPath = directory.file("spool.db")
    let registered = Date().addingTimeInterval(30)
    while (try? SpoolReader.open(path: spoolPath).status().destinations.isEmpty) != false, Date() < registered {
        usleep(50_000)
    }
    relay.stop()
    let stopped = Date().addingTimeInterval(30)
    while FileManager.default.fileExists(atPath: relay.socketPath), Date() < stopped { usleep(50_000) }
    try fillDirectly(spoolPath, rows: rows, devices: 8)

    let reader = try SpoolReader.open(path: spoolPath)
    var samples: [Double] = []
    var pending = 0
    for _ in 0..<25 {
        let started = WallClock.monotonicNs()
        let status = try reader.status()
        samples.append(Double(WallClock.monotonicNs() - started) / 1e6)
        pending = status.destinations.reduce(0) { $0 + $1.pending }
    }
    samples.sort()
    let configuration = try Configuration.load(path: relay.configPath)
    let tracks = TrackCache()
    var page: [Double] = []
    for _ in 0..<25 {
        let started = WallClock.monotonicNs()
        _ = try StatusReport.load(configuration: configuration, sketches: .cached(tracks)).json.jsonText
        page.append(Double(WallClock.monotonicNs() - started) / 1e6)
    }
    page.sort()
    var commands: [Double] = []
    for _ in 0..<5 {
        let started = WallClock.monotonicNs()
        let result = try RelayProcess.command(
            ["status", "--json", "--config", relay.configPath], directory: directory.path)
        commands.append(Double(WallClock.monotonicNs() - started) / 1e6)
        if result.stdout.isEmpty { note("status --json printed nothing: \(result.stderr)") }
    }
    commands.sort()
    let size = (try? FileManager.default.attributesOfItem(atPath: spoolPath)[.size] as? NSNumber)?.intValue ?? 0
    note(
        "status at \(rows) rows: page p50 \(page[page.count / 2]) ms (first \(page.max() ?? 0)), spool status p50 \(samples[samples.count / 2]) ms, command \(commands[2]) ms, pending \(pending)"
    )
    func rounded(_ sorted: [Double]) -> (Double, Double) {
        ((sorted[sorted.count / 2] * 10).rounded() / 10, (sorted[sorted.count - 1] * 10).rounded() / 10)
    }
    return StatusRun(
        page: rounded(page), read: rounded(samples),
        command: commands[2].rounded(), pending: pending, spoolBytes: size)
}

/// Rows straight into `positions` (the relay is stopped), with the devices' totals the writer's
/// merge would have left: building ten million through the socket would take minutes.
private func fillDirectly(_ path: String, rows: Int, devices: Int) throws {
    let db = try SQLiteDatabase(path: path)
    try db.execute("PRAGMA synchronous = OFF")
    try db.execute("BEGIN")
    for d in 0..<devices { try db.execute("INSERT INTO devices(name) VALUES('dev\(d)')") }
    try db.execute(
        """
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < \(rows - 1))
        INSERT INTO positions(device_id, fix_ms, received_ms, lat, lon, speed, course)
        SELECT (SELECT min(id) FROM devices) + i % \(devices), 1700000000000 + (i / \(devices)) * 1000, 1700000000000 + (i / \(devices)) * 1000,
               59 + (i % 1000) * 1e-5, 10.5, 2.5, 90 FROM n
        """)
    try db.execute(
        """
        UPDATE devices SET received = (SELECT count(*) FROM positions p WHERE p.device_id = devices.id),
            last_seq = (SELECT max(seq) FROM positions p WHERE p.device_id = devices.id),
            last_fix_ms = (SELECT max(fix_ms) FROM positions p WHERE p.device_id = devices.id),
            last_received_ms = (SELECT max(received_ms) FROM positions p WHERE p.device_id = devices.id)
        """)
    try db.execute("COMMIT")
    _ = try db.pragma("wal_checkpoint(TRUNCATE)")
}

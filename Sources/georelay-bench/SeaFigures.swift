import Foundation
import GeoRelayCore
import GeoRelayTestKit
import Glibc

/// The `sea` figure: a day at sea behind a metered uplink. The realistic day (86,400
/// fixes at 1 Hz) goes through the real relay, compressed into a few minutes, to a fake Traccar
/// server in a network namespace of the bench's own (`NetworkLab`). The satellite uplink
/// (`up0`, capped at the narrowband profile's 9.6 kbit/s each way) has a 100 KB day budget; the
/// cheap one (`up1`, unshaped) takes the route for the day's last hour. Reported: bytes on each
/// (the kernel's counters and the relay's own), positions delivered live and by backfill, and the
/// server's final track against what the destination's filter keeps of the spool's.
///
/// Device time runs 360 times faster than the relay's clock here, so the still-alive minimum
/// (15 min of device time) comes every 2.5 s and the budget's UTC day never rolls over; run it
/// away from midnight UTC.
func seaFigure() throws {
    guard let lab = try NetworkLab.orSkip("the day at sea (network namespaces)") else { return }
    let feedSeconds = quick ? 60.0 : 240.0
    let budget = 100_000
    let narrowband = 9_600
    try lab.shape(uplink: 0, bitsPerSecond: narrowband)
    let server = try lab.onServerSide { try FakeOsmAndServer(host: "0.0.0.0") }
    defer { server.http.stop() }
    let directory = try TemporaryDirectory()
    let configPath = directory.file("sea.json5")
    let socketPath = directory.file("r.sock")
    try """
    { spool: { path: "\(directory.file("spool.db"))" }, ingest: { socket: "\(socketPath)" },
      uplinks: [{ name: "iridium", interface: "up0", metered: true, budget: { dayBytes: \(budget) }, send: { minIntervalSeconds: 900 } },
                { name: "starlink", interface: "up1" }],
      destinations: [{ name: "traccar", url: "http://\(lab.serverAddress):\(server.http.port)" }] }
    """.write(toFile: configPath, atomically: true, encoding: .utf8)
    // GEORELAY_BENCH_CAPTURE=file: tcpdump's capture of the satellite uplink (`up0`) for the whole
    // run, to put beside the relay's meter (headers only: 128 bytes a packet).
    let capture = try ProcessInfo.processInfo.environment["GEORELAY_BENCH_CAPTURE"].map { path in
        let command = lab.commandOnRelaySide(["tcpdump", "-i", "up0", "-U", "-s", "128", "-w", path])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command.executable)
        process.arguments = command.arguments
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Capturing once tcpdump has written the file's header (it does as it starts), at most 10 s.
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? Int ?? 0) < 24 {
            usleep(20_000)
        }
        return process
    }
    defer {
        capture?.interrupt()
        capture?.waitUntilExit()
    }
    let relay = try RelayProcess(
        configPath: configPath, socketPath: socketPath, directory: directory.path,
        arguments: ["--log-level", "notice"], lab: lab)
    defer { relay.signal(SIGTERM) }

    // The day ends a minute ago, so no fix is in the relay's future.
    let day = realisticDay(startMs: WallClock.nowMs() - 86_400_000 - 60_000)
    let kept = filterSelection(day)
    let client = try UnixLineClient(path: socketPath)
    try client.write(#"{"hello":{"ack":true}}"# + "\n")
    _ = client.readLine()
    let switchAt = day.count * 23 / 24
    let start = WallClock.monotonicNs()
    let chunk = 100
    var atSwitch: (live: Int, starlink: Int64)?
    /// When the relay declared the budget spent (its log says so): what the interface and the
    /// server had by then, before the still-alive positions a spent uplink carries by design.
    var atSpent: (interface: Int64, ip: Int64, delivered: Int)?
    let iridiumAtStart = try lab.bytes(uplink: 0)
    let iridiumIPAtStart = try lab.ipBytes(uplink: 0)
    var refused = 0
    for first in stride(from: 0, to: day.count, by: chunk) {
        if first >= switchAt, atSwitch == nil {
            atSwitch = (server.positions.count, try lab.bytes(uplink: 1))
            try lab.route(via: 1)
        }
        let due = start + UInt64(Double(first) / Double(day.count) * feedSeconds * 1e9)
        while case let now = WallClock.monotonicNs(), now < due { usleep(UInt32(min((due - now) / 1000, 100_000))) }
        let lines = day[first..<min(day.count, first + chunk)].map(seaLine)
        try client.write(lines.joined())
        refused += client.readLines(lines.count).filter { !$0.hasPrefix("ok ") }.count
        if atSpent == nil, relay.stderrText().contains("backlog deferred") {
            atSpent = (
                try lab.bytes(uplink: 0) - iridiumAtStart, try lab.ipBytes(uplink: 0) - iridiumIPAtStart,
                server.positions.count
            )
        }
    }
    let fed = Double(WallClock.monotonicNs() - start) / 1e9
    // The backfill over the cheap link: until the server holds what the filter keeps.
    let keptTimes = Set(kept.map(\.timeMs))
    let drainStart = WallClock.monotonicNs()
    let deadline = Date().addingTimeInterval(300)
    while Date() < deadline, !keptTimes.isSubset(of: Set(server.positions.map(\.fixTimeMs))) { usleep(100_000) }
    let drained = Double(WallClock.monotonicNs() - drainStart) / 1e9
    // The relay's own accounting: its monitor looks every 5 s, and status reads what it committed.
    usleep(6_500_000)
    let accounting = try uplinkAccounting(lab: lab, configPath: configPath, directory: directory.path)
    let received = server.positions
    let receivedTimes = Set(received.map(\.fixTimeMs))
    let (live, starlinkAtSwitch) = atSwitch ?? (received.count, 0)
    let missing = keptTimes.subtracting(receivedTimes).count
    let extra = receivedTimes.subtracting(keptTimes).count
    let duplicates = received.count - receivedTimes.count
    let iridium = try lab.bytes(uplink: 0)
    let starlink = try lab.bytes(uplink: 1)
    note(
        "sea: fed \(day.count) fixes in \(Int(fed)) s (\(refused) refused); \(live) delivered over iridium before the switch, \(received.count - live) after; backfill drained in \(Int(drained)) s"
    )
    emit(
        "sea_day_budgeted_uplink",
        [
            ("fixes", .number(Double(day.count))), ("feed_seconds", .number(fed.rounded())),
            ("filter_keeps", .number(Double(kept.count))),
            ("delivered_live_over_iridium", .number(Double(live))),
            ("delivered_after_starlink_came", .number(Double(received.count - live))),
            ("server_positions", .number(Double(received.count))),
            ("missing_from_server", .number(Double(missing))), ("duplicates", .number(Double(duplicates))),
            ("still_alive_beyond_filter", .number(Double(extra))),
            ("iridium_budget_bytes", .number(Double(budget))),
            ("iridium_relay_counted_bytes", .number(Double(accounting.iridium))),
            ("iridium_interface_bytes", .number(Double(iridium - iridiumAtStart))),
            ("iridium_interface_bytes_when_declared_spent", .number(Double(atSpent?.interface ?? -1))),
            ("iridium_ip_bytes_when_declared_spent", .number(Double(atSpent?.ip ?? -1))),
            ("iridium_ip_bytes", .number(Double((try? lab.ipBytes(uplink: 0)) ?? -1) - Double(iridiumIPAtStart))),
            ("delivered_when_declared_spent", .number(Double(atSpent?.delivered ?? -1))),
            ("starlink_relay_counted_bytes", .number(Double(accounting.starlink))),
            ("starlink_interface_bytes", .number(Double(starlink - starlinkAtSwitch))),
            ("backfill_drain_seconds", .number(drained.rounded())),
            (
                "target",
                .string(
                    "iridium's interface when the budget is declared spent <= budget + 2 % (its Ethernet headers beside); nothing the filter keeps missing; no duplicates"
                )
            ),
        ])
}

/// The fixes the destination's default filter keeps of the day, in order: what the server
/// should end with, beside the still-alive positions the spent budget sent in between.
private func filterSelection(_ day: [Position]) -> [Position] {
    let filter = LocationFilter(settings: FilterSettings())
    var state = FilterState()
    var kept: [Position] = []
    for position in day {
        let (decision, next) = filter.evaluate(position, state: state)
        state = next
        if case .send = decision { kept.append(position) }
    }
    return kept
}

private func seaLine(_ p: Position) -> String {
    var line = #"{"device":"\#(p.device)","time":\#(p.timeMs),"lat":\#(p.lat),"lon":\#(p.lon),"speed":\#(p.speed ?? 0)"#
    if let course = p.course { line += #","course":\#(course)"# }
    return line + "}\n"
}

/// What the relay says each uplink carried today (`status --json` run in its namespace).
private func uplinkAccounting(lab: NetworkLab, configPath: String, directory: String) throws -> (
    iridium: Int64, starlink: Int64
) {
    let command = lab.commandOnRelaySide([RelayProcess.binary, "status", "--json", "--config", configPath])
    let result = try RelayProcess.run(command.executable, command.arguments, directory: directory)
    guard result.status == 0, case .object(let status) = try JSONParser.parse(result.stdout),
        case .array(let uplinks)? = status["uplinks"]
    else { return (-1, -1) }
    func today(_ name: String) -> Int64 {
        for case .object(let uplink) in uplinks where uplink["name"] == .string(name) {
            if case .number(let bytes)? = uplink["wireBytesToday"] { return Int64(bytes) }
        }
        return -1
    }
    return (today("iridium"), today("starlink"))
}

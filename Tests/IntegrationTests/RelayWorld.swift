import Foundation
import GeoRelayCore
import GeoRelayTestKit
import Glibc
import Synchronization
import Testing

/// A temporary directory with a config, a fake Traccar server and the real relay binary.
final class RelayWorld: @unchecked Sendable {
    let directory: TemporaryDirectory
    let server: FakeOsmAndServer
    var relay: RelayProcess?
    let extraConfig: String

    var socketPath: String { directory.file("r.sock") }
    var configPath: String { directory.file("georelay.json5") }
    /// Where the spool lives: the temporary directory, or another filesystem (a small tmpfs).
    let spoolDirectory: String?
    var spoolPath: String { spoolDirectory.map { "\($0)/spool.db" } ?? directory.file("spool.db") }

    init(spool: String = "", destination: String = "", ingest: String = "", spoolDirectory: String? = nil) throws {
        directory = try TemporaryDirectory()
        self.spoolDirectory = spoolDirectory
        server = try FakeOsmAndServer()
        extraConfig = ""
        try writeConfig(spool: spool, destination: destination, ingest: ingest)
    }

    /// - Parameter traccarURL: where the "traccar" destination sends (a fault proxy); the fake server by default.
    func writeConfig(
        spool: String = "", destination: String = "", ingest: String = "", moreDestinations: String = "",
        topLevel: String = "",
        traccarURL: String? = nil,
        link: String = "backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 }"
    ) throws {
        // Tests read status right after acting: the relay's default holds acknowledgements and counters
        // for up to 15 s (flash wear), which the crash and power-cut tests ask for by name.
        let spool = spool.contains("stateSyncSeconds") ? spool : "stateSyncSeconds: 0, \(spool)"
        let config = """
            {
              // written by the test
              spool: { path: "\(spoolPath)", \(spool) },
              ingest: { socket: "\(socketPath)", \(ingest) },
              destinations: [
                { name: "traccar", url: "\(traccarURL ?? server.url)", \(link),
                  \(destination.contains("filter:") ? "" : #"filter: { mode: "all" },"#) \(destination) },
                \(moreDestinations)
              ],
              \(topLevel)
            }
            """
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    /// Starts the relay on this world's config; throws when its socket does not accept within `timeout`.
    @discardableResult
    func start(timeout: Duration = .seconds(30)) throws -> RelayProcess {
        let process = try RelayProcess(
            configPath: configPath, socketPath: socketPath, directory: directory.path, startTimeout: timeout)
        relay = process
        return process
    }

    func client() throws -> UnixLineClient {
        let client = try UnixLineClient(path: socketPath)
        try client.write(#"{"hello":{"ack":true}}"# + "\n")
        _ = client.readLine()
        return client
    }

    func command(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        try RelayProcess.command(arguments + ["--config", configPath], directory: directory.path)
    }

    func statusJSON() throws -> JSONObject {
        let result = try command(["status", "--json"])
        guard result.status == 0, case .object(let object) = try JSONParser.parse(result.stdout) else {
            throw RelayProcessError(message: "status failed: \(result.stderr)")
        }
        return object
    }

    /// Polls `georelay status --json` (a separate process: there is no event to await) until
    /// `condition` holds or `timeout` passes; returns the last status read.
    @discardableResult
    func waitForStatus(timeout: Duration = .seconds(10), _ condition: (JSONObject) -> Bool) async throws -> JSONObject {
        let deadline = ContinuousClock.now + timeout
        while true {
            let status = try statusJSON()
            if condition(status) || ContinuousClock.now >= deadline { return status }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    deinit {
        relay = nil
        server.http.stop()
    }
}

/// A push destination "gw" on the fake gateway (its API key read from `GEORELAY_FAULT_API_KEY`),
/// optionally reached through a proxy at `base` (scheme, host and port).
func pushDestination(
    _ push: FakePushServer, via base: String? = nil,
    link: String = "backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 }"
) -> String {
    TestEnvironment.set("GEORELAY_FAULT_API_KEY", push.expected.apiKey)
    func routed(_ url: String) -> String { base.map { url.replacingOccurrences(of: push.http.url, with: $0) } ?? url }
    return """
        { name: "gw", type: "push", url: "\(routed(push.pushURL))", authBaseUrl: "\(routed(push.authBaseURL))",
          registrationBaseUrl: "\(routed(push.registrationBaseURL))", apiKey: { env: "GEORELAY_FAULT_API_KEY" },
          clientId: "\(push.expected.clientID)", tenant: "\(push.expected.tenant)", username: "\(push.expected.username)",
          batch: { maxDelaySeconds: 0 }, filter: { mode: "all" }, \(link) },
        """
}

/// The suite's standing security check: neither the API key nor any token the gateway issued
/// appears where an operator or a log collector can see it (the relay's stderr, `logs`,
/// `status`, `status --json`, and whatever other output a test adds).
func expectNoSecrets(
    _ world: RelayWorld, relay: RelayProcess, push: FakePushServer, alsoIn more: [String] = [],
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let visible =
        ([
            relay.stderrText(), try world.command(["logs"]).stdout, try world.command(["status"]).stdout,
            try world.command(["status", "--json"]).stdout,
        ] + more).joined(separator: "\n")
    #expect(!visible.isEmpty, sourceLocation: sourceLocation)
    for secret in [push.expected.apiKey] + push.issuedTokens {
        #expect(!visible.contains(secret), "a secret appears in logs or status", sourceLocation: sourceLocation)
    }
}

/// Starts each device's next `burst` lines on its own collector (a thread each, so a relay that
/// stops reading blocks no one else) and advances `written`.
func startBurst(_ burst: Int, devices: [String], clients: [UnixLineClient], written: inout [String: Int]) {
    for (index, device) in devices.enumerated() {
        let start = written[device, default: 0]
        let text = (start..<(start + burst)).map { line(device, $0) }.joined()
        let client = clients[index]
        Thread { try? client.write(text) }.start()
        written[device] = start + burst
    }
}

/// SIGKILLs `pid` from a thread as soon as `acknowledged()` reaches `target` (or after 30 s).
func killRelay(_ pid: Int32, whenAcknowledged target: Int, _ acknowledged: @escaping @Sendable () -> Int) {
    Thread {
        let deadline = Date().addingTimeInterval(30)
        while acknowledged() < target, Date() < deadline { usleep(200) }
        Glibc.kill(pid, SIGKILL)
    }.start()
}

/// Writes `count` positions of `device` from line `start` on, in batches of 500, reading each
/// batch's answers before writing the next; returns the answers in order.
func writeInBatches(_ client: UnixLineClient, device: String, from start: Int = 0, count: Int) throws -> [String] {
    var answers: [String] = []
    for batch in stride(from: start, to: start + count, by: 500) {
        let size = min(500, start + count - batch)
        try client.write((batch..<(batch + size)).map { line(device, $0) }.joined())
        answers += client.readLines(size)
    }
    return answers
}

/// A JSON line for a position.
func line(_ device: String, _ second: Int, lat: Double = 59.0, lon: Double = 10.0) -> String {
    #"{"device":"\#(device)","time":\#(1_784_953_800 + second),"lat":\#(lat),"lon":\#(lon),"speed":1.5}"# + "\n"
}

func fixTimeMs(_ second: Int) -> Int64 { Int64(1_784_953_800 + second) * 1000 }

/// Reads a collector's replies to `lines` (positions made by `line(device, i)`), recording each
/// `ok` as acknowledged; returns the first line with no reply (`lines.upperBound` when all came),
/// less when a killed relay closed the socket mid-stream.
func readAcknowledgements(
    _ client: UnixLineClient, device: String, lines: Range<Int>,
    into acknowledged: inout [String: Set<Int64>], counting acks: borrowing Atomic<Int>
) -> Int {
    var i = lines.lowerBound
    while i < lines.upperBound, let reply = client.readLine() {
        if reply.hasPrefix("ok ") {
            acknowledged[device, default: []].insert(fixTimeMs(i))
            acks.add(1, ordering: .relaxed)
        }
        i += 1
    }
    return i
}

/// A process's resident memory now (`VmRSS`) or at its peak (`VmHWM`), in bytes.
func residentBytes(pid: Int32, peak: Bool = false) throws -> Int {
    let key = peak ? "VmHWM:" : "VmRSS:"
    let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
    guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(key) }),
        let kB = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    else {
        throw RelayProcessError(message: "no \(key) in /proc/\(pid)/status")
    }
    return kB * 1024
}

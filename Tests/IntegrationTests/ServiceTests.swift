import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// Running as a systemd service: the notify protocol, `georelay check`.
@Suite(.offThePool) struct ServiceTests {
    @Test func tellsSystemdWhenReadyAliveAndStopping() async throws {
        let world = try RelayWorld()
        let notify = try FakeNotifySocket(path: world.directory.file("notify.sock"))
        func next() -> String { notify.next(timeout: .seconds(10))?.message ?? "" }
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path,
            environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "2000000"])
        let first = next()
        #expect(first.hasPrefix("READY=1"))
        #expect(next() == "WATCHDOG=1" || first.contains("WATCHDOG"))
        relay.signal(SIGTERM)
        var stopping = false
        for _ in 0..<10 where !stopping { stopping = next() == "STOPPING=1" }
        #expect(stopping)
    }

    @Test func checkPrintsEffectiveValuesWithSecretsMasked() throws {
        let world = try RelayWorld()
        try world.writeConfig(
            moreDestinations: """
                { name: "gw", type: "push", url: "https://gw.example.com/p", tenant: "acme", username: "alice",
                  auth: { mode: "token", token: "super-secret-token" } },
                """)
        let result = try world.command(["check"])
        #expect(result.status == 0)
        #expect(result.stdout.contains(#""token": "<secret>""#))
        #expect(!result.stdout.contains("super-secret-token"))
        #expect(result.stdout.contains(#""distanceMeters": 50"#))
        try "{ spool: { whenFull: 'never' } }".write(toFile: world.configPath, atomically: true, encoding: .utf8)
        let bad = try world.command(["check"])
        #expect(bad.status == 78)
        #expect(bad.stderr.contains("spool.whenFull"))
    }
}

@Suite(.offThePool) struct MetricsTests {
    /// A strict reader of the Prometheus text format: every sample's family declared
    /// with HELP and TYPE before it, names and labels well formed, values numbers.
    func parse(_ text: String) throws -> [String: Double] {
        var declared: Set<String> = []
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) where !line.isEmpty {
            if line.hasPrefix("# HELP ") { continue }
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                try #require(parts.count == 4 && ["counter", "gauge"].contains(parts[3]), "bad TYPE line: \(line)")
                declared.insert(String(parts[2]))
                continue
            }
            let space = try #require(line.lastIndex(of: " "), "no value: \(line)")
            let key = String(line[..<space])
            let value = try #require(Double(line[line.index(after: space)...]), "value not a number: \(line)")
            let name = String(key.prefix { $0 != "{" })
            try #require(name.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" }, "bad metric name: \(name)")
            try #require(declared.contains(name), "sample before its TYPE: \(line)")
            if key.contains("{") {
                try #require(key.hasSuffix("}"), "unclosed labels: \(line)")
                let labels = key.drop { $0 != "{" }.dropFirst().dropLast()
                try #require(
                    labels.split(separator: ",").allSatisfy { $0.contains("=\"") && $0.hasSuffix("\"") },
                    "bad labels: \(line)")
            }
            samples[key] = value
        }
        return samples
    }

    /// A separate metrics listener reads the configuration a reload (SIGHUP) put in place: a
    /// destination added shows at the next scrape. Before, it kept the one it started with.
    @Test func metricsFollowAReload() async throws {
        let port = freePort()
        let world = try RelayWorld()
        let metrics = #"metrics: { listen: "127.0.0.1:\#(port)" },"#
        try world.writeConfig(topLevel: metrics)
        let relay = try world.start()
        let easy = try GeoRelayForwardCurl()
        #expect(
            try parse(try easy.get("http://127.0.0.1:\(port)/metrics")).keys.contains(
                #"georelay_destination_pending{destination="traccar"}"#))
        try world.writeConfig(
            moreDestinations: #"{ name: "second", url: "\#(world.server.url)", filter: { mode: "all" } },"#,
            topLevel: metrics)
        relay.signal(SIGHUP)
        let deadline = ContinuousClock.now + .seconds(20)
        while !relay.stderrText().contains("destinations traccar, second"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(relay.stderrText().contains("reloaded"), "no reload within 20 s: \(relay.stderrText().suffix(800))")
        let samples = try parse(try easy.get("http://127.0.0.1:\(port)/metrics"))
        #expect(
            samples.keys.contains(#"georelay_destination_pending{destination="second"}"#),
            "the added destination is scraped: \(samples.keys.sorted().filter { $0.contains("pending") })")
    }

    @Test func metricsAndHealthzAreServed() async throws {
        let port = freePort()
        let world = try RelayWorld()
        try world.writeConfig(topLevel: #"metrics: { listen: "127.0.0.1:\#(port)" },"#)
        try world.start()
        let client = try world.client()
        try client.write(line("boat", 0) + line("boat", 1) + "garbage\n")
        _ = client.readLines(3)
        #expect(await world.server.waitUntil { $0.count >= 2 })
        let easy = try GeoRelayForwardCurl()
        var samples: [String: Double] = [:]
        for _ in 0..<100 {
            // The destination's acknowledgements are committed a moment after the server has the positions.
            samples = try parse(try easy.get("http://127.0.0.1:\(port)/metrics"))
            if samples["georelay_destination_sent_total{destination=\"traccar\"}"] == 2 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(samples["georelay_positions_received_total{device=\"boat\"}"] == 2)
        #expect(samples["georelay_ingest_rejected_total{code=\"parse\"}"] == 1)
        #expect(samples["georelay_destination_pending{destination=\"traccar\"}"] == 0)
        #expect(samples["georelay_destination_sent_total{destination=\"traccar\"}"] == 2)
        #expect((samples["georelay_destination_wire_bytes_total{destination=\"traccar\"}"] ?? 0) > 0)
        #expect((samples["georelay_spool_bytes"] ?? 0) > 0)
        // The device health checks: every check has its gauge, and a delivering relay's loops and links are ok.
        for check in ["loops", "spool", "disk", "clock", "sources", "links"] {
            #expect(
                samples["georelay_health_check{check=\"\(check)\"}"] != nil, "no georelay_health_check for \(check)")
        }
        #expect(samples["georelay_health_check{check=\"loops\"}"] == 0)
        #expect(samples["georelay_health_check{check=\"links\"}"] == 0)
        #expect((samples["georelay_disk_free_bytes"] ?? 0) > 0)
        #expect(samples["georelay_source_rollover_fixes{device=\"boat\"}"] == 0)
        #expect(samples["georelay_source_untimed_fixes_total{device=\"boat\"}"] == 0)
        #expect(try easy.get("http://127.0.0.1:\(port)/healthz") == "ok\n")
        // The uplink budget: bytes today and this month, per destination and in all.
        let status = try world.statusJSON()
        #expect((status["uplink"]?["wireBytesToday"]?.number ?? 0) > 0)
        let traccar = try #require(status["destinations"]?.array?.first)
        #expect(traccar["wireBytesThisMonth"]?.number == traccar["wireBytesToday"]?.number)
        #expect(traccar["drainEstimateSeconds"]?.number == 0)
    }
}

import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// The systemd watchdog means it: keep-alives only while the ingest loop and the spool
/// writer turn over, and `/healthz` and `status` say the same.
///
/// The real binary under a fake notify socket (`WATCHDOG_USEC` 2 s: keep-alive every second,
/// a part stalled after 2 s without a turn), wedged through the test hook
/// (`GEORELAY_TEST_WEDGE=PART:8@3`: that part's thread blocks for 8 s from 3 s after start).
@Suite(.offThePool) struct WatchdogTests {
    /// Each datagram read is awaited for at most this long; the relay sends one a second while healthy.
    static let datagramWait: Duration = .seconds(15)

    @Test(arguments: ["ingest", "writer"])
    func keepAlivesStopWhileALoopIsWedgedAndResumeAfter(part: String) async throws {
        let name = part == "ingest" ? "ingest loop" : "spool writer"
        let other = part == "ingest" ? "writer" : "ingest"
        let port = freePort()
        let world = try RelayWorld()
        try world.writeConfig(topLevel: #"metrics: { listen: "127.0.0.1:\#(port)" },"#)
        let notify = try FakeNotifySocket(path: world.directory.file("notify.sock"))
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path,
            environment: [
                "NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "2000000",
                "GEORELAY_TEST_HOOKS": "1", "GEORELAY_TEST_WEDGE": "\(part):8@3",
            ])
        world.relay = relay
        // Connected before the wedge: a wedged loop would not answer the hello.
        let client = try world.client()
        let healthz = "http://127.0.0.1:\(port)/healthz"
        let easy = try GeoRelayForwardCurl()

        let ready = try #require(notify.next(timeout: Self.datagramWait), "no READY=1 within \(Self.datagramWait)")
        #expect(ready.message.hasPrefix("READY=1"))
        #expect(try easy.fetch(healthz) == (200, "ok\n"))

        // Healthy: keep-alives, until the watchdog reports the stall.
        var before: [ContinuousClock.Instant] = []
        var stall: FakeNotifySocket.Datagram?
        while stall == nil {
            let datagram = try #require(
                notify.next(timeout: Self.datagramWait),
                "no datagram within \(Self.datagramWait) before the stall; stderr: \(relay.stderrText())")
            if datagram.message == "WATCHDOG=1" { before.append(datagram.at) }
            if datagram.message.hasPrefix("STATUS="), datagram.message.contains("stalled") { stall = datagram }
        }
        #expect(stall?.message.contains(name) == true, "the STATUS names the part: \(stall?.message ?? "")")
        #expect(before.count >= 2, "keep-alives while healthy: \(before.count)")

        // Wedged: /healthz, /metrics and status say which part, and a position waits for its answer.
        let wedged = try easy.fetch(healthz)
        #expect(wedged.status == 503)
        #expect(wedged.body.hasPrefix("\(name) stalled: no turn for "), "healthz body: \(wedged.body)")
        let metrics = try easy.get("http://127.0.0.1:\(port)/metrics")
        #expect(
            metrics.contains("georelay_loop_up{loop=\"\(part)\"} 0\n")
                && metrics.contains("georelay_loop_up{loop=\"\(other)\"} 1\n"))
        let during = try world.statusJSON()
        #expect(during["health"]?["state"]?.string == "stalled")
        #expect(during["health"]?[part]?["state"]?.string == "stalled")
        #expect(during["health"]?[other]?["state"]?.string == "alive")
        #expect((during["health"]?[part]?["lastTurnAgeSeconds"]?.number ?? 0) > 2)
        #expect(try world.command(["status"]).stdout.contains("\(name) STALLED (no turn for "))
        try client.write(line("boat", 1))

        // Recovery: STATUS back to normal first, then keep-alives again; none while stalled.
        var recovered = false
        var after: ContinuousClock.Instant?
        while after == nil {
            let datagram = try #require(
                notify.next(timeout: Self.datagramWait),
                "no datagram within \(Self.datagramWait) after the stall; stderr: \(relay.stderrText())")
            if datagram.message == "WATCHDOG=1" {
                #expect(recovered, "a keep-alive went out while the \(name) was stalled")
                after = datagram.at
            }
            if datagram.message.hasPrefix("STATUS=relaying to ") { recovered = true }
        }
        // The wedge lasts 8 s, its detection takes at most the 2 s limit and a check.
        let gap = try #require(before.last).duration(to: try #require(after))
        #expect(gap >= .seconds(4), "keep-alives paused for only \(gap)")
        #expect(
            client.readLine()?.hasPrefix("ok ") == true, "the position written during the wedge is answered after it")
        #expect(try easy.fetch(healthz) == (200, "ok\n"))
        let healthy = try await world.waitForStatus { $0["health"]?["state"]?.string == "ok" }
        #expect(healthy["health"]?[part]?["state"]?.string == "alive")
        #expect(
            try #require(notify.next(timeout: .seconds(3))).message == "WATCHDOG=1",
            "keep-alives keep coming after the recovery")

        relay.signal(SIGTERM)
        // One report per episode, in the log, saying what follows from it.
        let stderr = relay.stderrText()
        #expect(stderr.components(separatedBy: "\(name) stalled: no turn for ").count == 2, "stderr: \(stderr)")
        #expect(stderr.contains("withholding the watchdog keep-alive"))
        #expect(stderr.components(separatedBy: "\(name) turning over again").count == 2)
        #expect(
            !FileManager.default.fileExists(atPath: world.socketPath + ".health"),
            "the health file is removed at a clean stop")
        let down = try world.statusJSON()
        #expect(down["health"]?["state"]?.string == "unknown")
        #expect(down["health"]?["reason"]?.string == "the relay is not running")
    }

    /// A manager that stops reading its notify socket (the kernel then queues ten datagrams and
    /// refuses the rest) must not hold the relay: keep-alives are dropped, and SIGTERM still stops
    /// it at once. Before, the send blocked and the relay hung after `STOPPING=1` for ever.
    @Test func aNotifySocketNobodyReadsNeverHoldsTheStop() async throws {
        let world = try RelayWorld()
        let notify = try FakeNotifySocket(path: world.directory.file("notify.sock"))
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path,
            environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "100000"])
        world.relay = relay
        #expect(try #require(notify.next(timeout: Self.datagramWait)).message.hasPrefix("READY=1"))
        // The scenario itself: two seconds unread, forty keep-alives at one per 50 ms, four times the queue.
        try await Task.sleep(for: .seconds(2))
        let client = try world.client()
        try client.write(line("boat", 1))
        #expect(client.readLine()?.hasPrefix("ok ") == true, "the relay still answers with its notify socket full")
        #expect(
            relay.signal(SIGTERM, within: .seconds(10)),
            "SIGTERM did not stop the relay within 10 s; stderr: \(relay.stderrText())")
        #expect(relay.exitStatus == 0)
        var queued = 0
        while notify.next(timeout: .milliseconds(100)) != nil { queued += 1 }
        let limit =
            Int(
                (try? String(contentsOfFile: "/proc/sys/net/unix/max_dgram_qlen", encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 10
        #expect(queued >= limit, "the queue was full (\(limit) datagrams) while nobody read it: \(queued) were queued")
    }

    @Test func theWedgeHookIsInertWithoutTestHooks() async throws {
        let world = try RelayWorld()
        let notify = try FakeNotifySocket(path: world.directory.file("notify.sock"))
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path,
            environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "2000000", "GEORELAY_TEST_WEDGE": "ingest:30"])
        world.relay = relay
        #expect(try #require(notify.next(timeout: Self.datagramWait)).message.hasPrefix("READY=1"))
        // A wedged loop would not answer the hello, nor the position.
        let client = try world.client()
        try client.write(line("boat", 1))
        #expect(client.readLine()?.hasPrefix("ok ") == true)
        let status = try await world.waitForStatus { $0["health"]?["state"]?.string == "ok" }
        #expect(status["health"]?["ingest"]?["state"]?.string == "alive")
        #expect(status["health"]?["stallAfterSeconds"]?.number == 2)
        relay.signal(SIGTERM)
        #expect(relay.stderrText().contains("GEORELAY_TEST_WEDGE ignored"))
    }

    @Test func aMalformedWedgeIsRefusedAtStart() throws {
        let world = try RelayWorld()
        let result = try RelayProcess.run(
            RelayProcess.binary, ["run", "--config", world.configPath], directory: world.directory.path,
            environment: ["GEORELAY_TEST_HOOKS": "1", "GEORELAY_TEST_WEDGE": "forwarder:3"], timeout: .seconds(30))
        #expect(result.status != 0)
        #expect(result.stderr.contains("GEORELAY_TEST_WEDGE 'forwarder:3'"))
    }
}

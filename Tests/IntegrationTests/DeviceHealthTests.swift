import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// `georelay status --health` and `georelay check --spool` on the real binary: the exit status
/// a script sees for a healthy, a degraded and a failing box, and quick_check on a spool copy
/// with a page overwritten.
///
/// adjtimex's answer is injected (`GEORELAY_TEST_CLOCK_SYNC`), so this machine's own clock
/// discipline does not decide the outcome. Every blocking step (starting the relay, socket
/// reads, one-shot commands) runs off the cooperative pool (`offThePool`): the rest of the
/// suite awaits on its two threads, and timing-sensitive tests (the watch, failover windows)
/// miss their bounds when those are held.
@Suite(.offThePool) struct DeviceHealthTests {
    static let hooks = ["GEORELAY_TEST_HOOKS": "1", "GEORELAY_TEST_CLOCK_SYNC": "synchronised"]
    typealias Output = (status: Int32, stdout: String, stderr: String)

    static func health(_ world: RelayWorld, json: Bool = false) throws -> Output {
        try RelayProcess.run(
            RelayProcess.binary, ["status", "--health", "--config", world.configPath] + (json ? ["--json"] : []),
            directory: world.directory.path, environment: hooks)
    }

    /// `status --json` until `condition` holds or 10 s pass (a separate process: nothing to
    /// await); the last status read. Call it off the pool.
    static func poll(_ world: RelayWorld, _ condition: (JSONObject) -> Bool) throws -> JSONObject {
        let deadline = Date().addingTimeInterval(10)
        while true {
            let status = try world.statusJSON()
            if condition(status) || Date() >= deadline { return status }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    /// Starts the relay, sends `lines` and returns the answers to them.
    static func startAndSend(_ world: RelayWorld, _ lines: String, answers: Int) throws -> [String] {
        try world.start()
        let client = try world.client()
        try client.write(lines)
        return client.readLines(answers)
    }

    @Test func healthyThenStoppedRelayExitsZeroThenTwo() async throws {
        let world = try RelayWorld()
        let answers = try await offThePool { try Self.startAndSend(world, line("boat", 0), answers: 1) }
        #expect(answers.first?.hasPrefix("ok ") == true, "answers: \(answers)")
        #expect(await world.server.waitUntil { $0.count >= 1 }, "the fake Traccar server got no position within 30 s")
        let (healthy, stopped) = try await offThePool {
            // The acknowledgement is committed a moment after the server has the position.
            _ = try Self.poll(world) { ($0["destinations"]?.array?.first?["pending"]?.number ?? 1) == 0 }
            let healthy = try Self.health(world)
            world.relay?.signal(SIGTERM)
            return (healthy, try Self.health(world))
        }
        #expect(healthy.status == 0, "status --health: \(healthy.stdout) \(healthy.stderr)")
        #expect(healthy.stdout.hasPrefix("ok\n"))
        #expect(healthy.stdout.contains("readable, quick_check ok"))
        #expect(healthy.stdout.contains("synchronised (max error"))
        #expect(stopped.status == 2, "status --health: \(stopped.stdout)")
        #expect(stopped.stdout.contains("the relay is not running"))
    }

    @Test func destinationNotDeliveringIsDegraded() async throws {
        let world = try RelayWorld()
        // Nothing listens there: the destination goes to backoff with the position waiting.
        try world.writeConfig(traccarURL: "http://127.0.0.1:\(freePort())/")
        let (answers, degraded) = try await offThePool {
            let answers = try Self.startAndSend(world, line("boat", 0), answers: 1)
            _ = try Self.poll(world) {
                ["backoff", "probing"].contains($0["destinations"]?.array?.first?["state"]?.string ?? "")
            }
            return (answers, try Self.health(world, json: true))
        }
        #expect(answers.first?.hasPrefix("ok ") == true, "answers: \(answers)")
        #expect(degraded.status == 1, "status --health: \(degraded.stdout) \(degraded.stderr)")
        guard case .object(let object) = try JSONParser.parse(degraded.stdout) else {
            Issue.record("not JSON: \(degraded.stdout)")
            return
        }
        #expect(object["state"]?.string == "degraded")
        let links = object["checks"]?["links"]
        #expect(links?["state"]?.string == "degraded")
        #expect(links?["summary"]?.string?.hasPrefix("traccar: ") == true, "links: \(links?["summary"]?.string ?? "")")
        #expect(links?["destinations"]?.array?.first?["lastSuccess"] == .null)
        #expect(object["reasons"]?.array?.first?.string?.hasPrefix("links: traccar: ") == true)
    }

    @Test func receiversWithoutTimeOrRolledOverAreCountedAndNamed() async throws {
        let world = try RelayWorld()
        let nowSeconds = Int(WallClock.nowMs() / 1000)
        let rolledOver = nowSeconds - 1024 * 7 * 86_400
        let lines =
            #"{"device":"old","time":\#(rolledOver),"lat":59,"lon":10}"# + "\n"
            + #"{"device":"notime","lat":59,"lon":10}"# + "\n" + #"{"device":"notime","lat":59,"lon":10}"# + "\n"
            + #"{"device":"good","time":\#(nowSeconds),"lat":59,"lon":10}"# + "\n"
        let (answers, status) = try await offThePool {
            let answers = try Self.startAndSend(world, lines, answers: 4)
            // The refusals' counters reach the spool with the ingest loop's next turn.
            return (
                answers,
                try Self.poll(world) { status in
                    let receivers = status["deviceHealth"]?["checks"]?["sources"]?["receivers"]?.array ?? []
                    return receivers.contains { $0["name"]?.string == "notime" }
                }
            )
        }
        #expect(answers.count == 4 && answers[1].hasPrefix("err time missing time"), "answers: \(answers)")
        let sources = status["deviceHealth"]?["checks"]?["sources"]
        let receivers = Dictionary(
            uniqueKeysWithValues: (sources?["receivers"]?.array ?? []).compactMap { row in
                row["name"]?.string.map { ($0, row) }
            })
        #expect(receivers["old"]?["rollover"]?.number == 1)
        #expect(receivers["old"]?["rolledOverNow"]?.bool == true)
        #expect(receivers["notime"]?["untimed"]?.number == 2)
        #expect(receivers["good"]?["rollover"]?.number == 0)
        #expect(sources?["state"]?.string == "degraded")
        let summary = sources?["summary"]?.string ?? ""
        #expect(
            summary.contains("old dates its fixes 1024 weeks back")
                && summary.contains("notime sent 2 fixes without a time"), "summary: \(summary)")
        // The rolled-over fix does not count as the clock's newest fix: the good one does.
        let ahead = try #require(status["deviceHealth"]?["checks"]?["clock"]?["newestFixAheadSeconds"]?.number)
        #expect(abs(ahead) < 600, "newest fix \(ahead) s from the clock")
    }

    @Test func checkSpoolFindsAnOverwrittenPageInACopy() async throws {
        let world = try RelayWorld()
        let copy = world.directory.file("copy.db")
        let (sound, size, corrupt, health) = try await offThePool {
            try world.start()
            _ = try writeInBatches(try world.client(), device: "boat", count: 3000)
            world.relay?.signal(SIGTERM)
            let sound = try world.command(["check", "--spool"])
            // A copy with garbage over one page in the middle (page 1, the header, left alone).
            try FileManager.default.copyItem(atPath: world.spoolPath, toPath: copy)
            let size = ((try FileManager.default.attributesOfItem(atPath: copy))[.size] as? NSNumber)?.intValue ?? 0
            guard let handle = FileHandle(forUpdatingAtPath: copy) else {
                throw RelayProcessError(message: "cannot open \(copy)")
            }
            try handle.seek(toOffset: UInt64(size / 4096 / 2) * 4096)
            try handle.write(contentsOf: Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 151 &+ 7) }))
            try handle.close()
            // The same configuration, its spool path pointed at the copy.
            let config = try String(contentsOfFile: world.configPath, encoding: .utf8).replacingOccurrences(
                of: world.spoolPath, with: copy)
            try config.write(toFile: world.configPath, atomically: true, encoding: .utf8)
            return (sound, size, try world.command(["check", "--spool"]), try Self.health(world))
        }
        #expect(sound.status == 0, "check --spool: \(sound.stdout) \(sound.stderr)")
        #expect(sound.stdout.contains(": ok (quick_check)"))
        #expect(size >= 8 * 4096, "the spool is only \(size) bytes")
        #expect(corrupt.status == 1, "check --spool on the damaged copy: \(corrupt.stdout) \(corrupt.stderr)")
        #expect(corrupt.stdout.contains("quick_check found"), "output: \(corrupt.stdout)")
        #expect(
            corrupt.stdout.split(separator: "\n").dropFirst().allSatisfy { $0.hasPrefix("  ") },
            "each line of the answer indented: \(corrupt.stdout)")
        // status --health says the same, as failing, instead of stopping at the unreadable spool.
        #expect(health.status == 2, "status --health on the damaged copy: \(health.stdout) \(health.stderr)")
        #expect(
            health.stdout.contains("spool    FAILING") && health.stdout.contains("quick_check found"),
            "status --health: \(health.stdout)")
    }
}

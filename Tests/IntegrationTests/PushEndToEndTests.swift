import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// The real binary with a push destination (and a Traccar one beside it).
@Suite(.offThePool) struct PushEndToEndTests {
    func config(_ world: RelayWorld, _ push: FakePushServer, extra: String = "") -> String {
        """
        { name: "gw", type: "push", url: "\(push.pushURL)", authBaseUrl: "\(push.authBaseURL)",
          registrationBaseUrl: "\(push.registrationBaseURL)", eventsBaseUrl: "\(push.eventsBaseURL)",
          apiKey: { env: "GEORELAY_TEST_API_KEY" }, clientId: "\(push.expected.clientID)", tenant: "\(push.expected.tenant)",
          username: "\(push.expected.username)", batch: { maxDelaySeconds: 0.2 },
          backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 }, filter: { mode: "all" }, \(extra) },
        """
    }

    @Test func loginModeEndToEndWithDutyEventsTokenRefreshAndNoSecretAnywhere() async throws {
        TestEnvironment.set("GEORELAY_TEST_API_KEY", "key-123")
        let world = try RelayWorld()
        let push = try FakePushServer()
        defer { push.http.stop() }
        try world.writeConfig(moreDestinations: config(world, push))
        let relay = try world.start()
        let client = try world.client()
        try client.write((0..<20).map { line("bow", $0) }.joined())
        #expect(client.readLines(20).allSatisfy { $0.hasPrefix("ok ") })
        #expect(await push.waitUntil { $0.count >= 20 })
        #expect(await world.server.waitUntil { $0.count >= 20 })
        #expect(push.problems.isEmpty)
        #expect(push.points.map(\.trackerId).allSatisfy { $0 == "bow@alice" })

        // Duty events with the daemon's stored token.
        let on = try world.command(["duty", "on", "--destination", "gw"])
        #expect(on.status == 0, "\(on.stdout) \(on.stderr)")
        #expect(try world.command(["duty", "off"]).status == 0)
        #expect(push.events == ["on_duty", "off_duty"])
        #expect(try world.command(["duty", "sideways"]).status == 64)

        // A token refreshed by the command is the one the daemon uses next.
        let issuedBefore = push.tokensIssued
        let refresh = try world.command(["token", "refresh"])
        #expect(refresh.status == 0, "\(refresh.stdout) \(refresh.stderr)")
        #expect(push.tokensIssued == issuedBefore + 1)
        push.revokeAllButNewest()
        try client.write((20..<30).map { line("bow", $0) }.joined())
        _ = client.readLines(10)
        #expect(await push.waitUntil { $0.count >= 30 })
        #expect(push.tokensIssued == issuedBefore + 1)

        // `send` to the push destination.
        #expect(
            try world.command(["send", "--device", "mast", "--lat", "1", "--lon", "2", "--destination", "gw"]).status
                == 0)
        #expect(await push.waitUntil { $0.contains { $0.trackerId == "mast@alice" } })

        // The gateway has every position; the relay records the answers a moment after it stored
        // them (a moment that a machine busy with the rest of the suite stretches).
        func gateway(_ status: JSONObject) -> JSONValue? {
            status["destinations"]?.array?.first { $0["name"]?.string == "gw" }
        }
        let status = try await world.waitForStatus { gateway($0)?["pending"]?.number == 0 }
        let gw = try #require(gateway(status))
        #expect(gw["type"]?.string == "push")
        #expect(gw["encoding"]?.string == "zstd")
        #expect(
            gw["pending"]?.number == 0,
            "the gateway has them all; the relay still counts \(gw["pending"] ?? .null) pending")

        relay.signal(SIGTERM)
        // No secret anywhere an operator or a log collector can see.
        let token = TokenStore(spoolPath: world.spoolPath, destination: "gw")
        #expect(
            (try FileManager.default.attributesOfItem(atPath: token.path)[.posixPermissions] as? NSNumber)?.intValue
                == 0o600)
        try expectNoSecrets(
            world, relay: relay, push: push, alsoIn: [on.stdout, on.stderr, refresh.stdout, refresh.stderr])
    }

    @Test func tokenModeAuthFailureShowsInStatusAndPositionsKeepSpooling() async throws {
        let world = try RelayWorld()
        let push = try FakePushServer()
        defer { push.http.stop() }
        let tokenPath = world.directory.file("caller.token")
        try "not-a-valid-token".write(toFile: tokenPath, atomically: true, encoding: .utf8)
        try world.writeConfig(
            moreDestinations: """
                { name: "gw", type: "push", url: "\(push.pushURL)", tenant: "acme", username: "alice",
                  auth: { mode: "token", token: { file: "\(tokenPath)" } }, batch: { maxDelaySeconds: 0 }, probe: { intervalSeconds: 1 }, filter: { mode: "all" } },
                """)
        try world.start()
        let client = try world.client()
        try client.write((0..<5).map { line("a", $0) }.joined())
        #expect(client.readLines(5).allSatisfy { $0.hasPrefix("ok ") })
        var gw: JSONValue?
        for _ in 0..<200 {
            gw = try world.statusJSON()["destinations"]?.array?.first { $0["name"]?.string == "gw" }
            if gw?["state"]?.string == "auth-failed" { break }
            try await Task.sleep(for: .milliseconds(25))
        }
        #expect(gw?["state"]?.string == "auth-failed")
        #expect(gw?["pending"]?.number == 5)
        #expect(gw?["lastError"]?.string?.contains("not-a-valid-token") == false)
        try push.issueToken().write(toFile: tokenPath, atomically: true, encoding: .utf8)
        #expect(await push.waitUntil(timeout: .seconds(20)) { $0.count >= 5 })
    }

    @Test func invalidPushConfigurationIsRefusedWithTheSDKCode() throws {
        let world = try RelayWorld()
        try world.writeConfig(
            moreDestinations:
                #"{ name: "gw", type: "push", url: "https://gw.example.com/p", tenant: "acme", auth: { mode: "token", token: "t" } },"#
        )
        let result = try world.command(["run"])
        #expect(result.status == 78)
        #expect(result.stderr.contains("destinations[1].username: USERNAME_REQUIRED"))
    }
}

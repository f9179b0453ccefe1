import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// The running relay counts what each uplink carries: here loopback named as an uplink, which
/// the route to the fake Traccar server leaves by, so every wire byte the destination counts
/// (probes included) is the uplink's too.
@Suite(.offThePool) struct UplinkAccountingTests {
    @Test func theRelayPutsEachWireByteOnTheUplinkItLeftBy() async throws {
        let world = try RelayWorld()
        let port = freePort()
        try world.writeConfig(
            topLevel:
                #"uplinks: [{ name: "loop", interface: "lo", metered: true, budget: { dayBytes: 1 } }, { name: "sat", interface: "georelay-none", budget: { monthBytes: 1000000 } }], metrics: { listen: "127.0.0.1:\#(port)" },"#
        )
        try world.start()
        let client = try world.client()
        try client.write((0..<20).map { line("boat", $0) }.joined())
        #expect(client.readLines(20).allSatisfy { $0.hasPrefix("ok ") })
        // A budget of 1 byte: the first round is bounded to one position, which spends it; the
        // rest wait (one still-alive position per device per interval at most).
        #expect(await world.server.waitUntil { $0.count >= 1 })
        // The monitor looks every 5 s: the uplink's count catches up with the destination's.
        let status = try await world.waitForStatus(timeout: .seconds(30)) { status in
            let sent = status["destinations"]?.array?.first?["wireBytesToday"]?.number ?? 0
            return sent > 0 && status["uplinks"]?.array?.first?["wireBytesToday"]?.number == sent
        }
        let destination = try #require(status["destinations"]?.array?.first)
        let uplinks = try #require(status["uplinks"]?.array, "status --json has uplinks: \(status)")
        #expect(uplinks.count == 2)
        #expect(uplinks[0]["name"]?.string == "loop" && uplinks[0]["metered"] == .bool(true))
        #expect(
            uplinks[0]["wireBytesToday"]?.number == destination["wireBytesToday"]?.number,
            "every byte went over loopback: uplink \(uplinks[0]), destination \(destination["wireBytesToday"] ?? .null)"
        )
        #expect(uplinks[0]["wireBytesThisMonth"]?.number == uplinks[0]["wireBytesToday"]?.number)
        #expect(uplinks[1]["wireBytesToday"]?.number == 0, "nothing went over an interface that does not exist")
        #expect(uplinks[0]["budget"]?["spent"] == .bool(true) && uplinks[0]["budget"]?["dayLeft"]?.number == 0)
        #expect(uplinks[0]["budget"]?["monthBytes"] == .null)
        #expect(
            uplinks[1]["budget"]?["spent"] == .bool(false) && uplinks[1]["budget"]?["monthLeft"]?.number == 1_000_000)
        let text = try world.command(["status"]).stdout
        #expect(text.contains("\nuplinks\n  loop (lo, metered): today "), "the screen lists the uplinks: \(text)")
        #expect(text.contains(" of 1 B, this month "), "the day's budget beside today's bytes: \(text)")
        #expect(
            text.contains(", BUDGET SPENT (19 positions deferred), carrying traccar\n"),
            "the backlog the spent budget holds: \(text)")
        #expect(
            text.contains(
                "  sat (georelay-none): today 0 B, this month 0 B of 976.6 KiB, carrying no destination now\n"))
        let metrics = try GeoRelayForwardCurl().get("http://127.0.0.1:\(port)/metrics")
        #expect(
            metrics.contains("georelay_destination_uplink{destination=\"traccar\",uplink=\"loop\"} 1\n"),
            "metrics: \(metrics.suffix(800))")
        #expect(metrics.contains("georelay_uplink_wire_bytes_today{uplink=\"sat\"} 0\n"))
        #expect(metrics.contains("georelay_uplink_wire_bytes_month{uplink=\"loop\"} "))
    }
}

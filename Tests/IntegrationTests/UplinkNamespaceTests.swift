import Foundation
import GeoRelayTestTraits
import Testing
import GeoRelayCore
import GeoRelayTestKit
@testable import GeoRelayService

/// Two uplinks as two real interfaces, in network namespaces this test creates (`NetworkLab`):
/// the relay's side reaches the fake Traccar server over `up0` ("starlink") until the route
/// moves to `up1` ("iridium"). What went over each is read from the kernel's interface
/// counters and from the relay's own accounting, and nothing answered `ok` is lost.
@Suite(.offThePool) struct UplinkNamespaceTests {
    @Test func movingTheRouteMovesTheDestinationAndItsBytesToTheOtherUplink() async throws {
        guard let lab = try NetworkLab.orSkip("uplinks in network namespaces") else { return }
        // A new connection per request: the route of the moment, and its source address, for each.
        let server = try lab.onServerSide { try FakeOsmAndServer(closesAfterEachResponse: true, host: "0.0.0.0") }
        defer { server.http.stop() }
        let world = try RelayWorld()
        try world.writeConfig(topLevel: #"uplinks: [{ name: "starlink", interface: "up0" }, { name: "iridium", interface: "up1", metered: true }],"#,
                              traccarURL: "http://\(lab.serverAddress):\(server.http.port)")
        let relay = try RelayProcess(configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path, lab: lab)
        world.relay = relay
        func status() throws -> JSONObject {
            let command = lab.commandOnRelaySide([RelayProcess.binary, "status", "--json", "--config", world.configPath])
            let result = try RelayProcess.run(command.executable, command.arguments, directory: world.directory.path)
            guard result.status == 0, case .object(let object) = try JSONParser.parse(result.stdout) else {
                throw RelayProcessError(message: "status --json in the relay's namespace: \(result.status) \(result.stderr)")
            }
            return object
        }
        func waitForLog(_ text: String) async throws {
            let deadline = ContinuousClock.now + .seconds(20)
            while !relay.stderrText().contains(text) {
                guard ContinuousClock.now < deadline else {
                    throw RelayProcessError(message: "no '\(text)' in the relay's log within 20 s: \(relay.stderrText().suffix(1500))")
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }

        try await waitForLog("traccar now via starlink (up0)")
        let client = try world.client()
        try client.write((0..<10).map { line("boat", $0) }.joined())
        #expect(client.readLines(10).allSatisfy { $0.hasPrefix("ok ") })
        #expect(await server.waitUntil { $0.count >= 10 })
        let before = try await waitForAccounting(status) { $0.destination > 0 && $0.starlink == $0.destination }
        #expect(before.iridium == 0, "nothing over iridium before the switch: \(before)")
        let counters = (try lab.bytes(uplink: 0), try lab.bytes(uplink: 1))
        #expect(counters.0 >= Int64(before.destination), "up0 carried at least the HTTP bytes: \(counters.0) < \(before.destination)")

        // The failover: from now on the server is reached over up1, and the relay says so.
        try lab.route(via: 1)
        try await waitForLog("traccar now via iridium (up1, metered)")
        try client.write((10..<20).map { line("boat", $0) }.joined())
        #expect(client.readLines(10).allSatisfy { $0.hasPrefix("ok ") })
        #expect(await server.waitUntil { $0.count >= 20 })
        let after = try await waitForAccounting(status) { $0.destination > before.destination && $0.starlink + $0.iridium == $0.destination }
        #expect(after.starlink == before.starlink, "starlink carried nothing more: \(before) → \(after)")
        #expect(after.iridium == after.destination - before.destination, "iridium carried every byte since the switch: \(after)")
        let moved = (try lab.bytes(uplink: 0) - counters.0, try lab.bytes(uplink: 1) - counters.1)
        #expect(moved.1 >= Int64(after.iridium), "up1 carried at least the HTTP bytes: \(moved)")
        #expect(moved.0 < moved.1 / 10, "up0 all but idle after the switch (neighbour probes at most): \(moved)")
        #expect(server.positions.map(\.fixTimeMs) == (0..<20).map(fixTimeMs), "every position once, in order")
        print("uplinks in namespaces: before the switch starlink \(Int(before.starlink)) B (up0 \(counters.0) B on the wire); after it iridium \(Int(after.iridium)) B (up1 +\(moved.1) B, up0 +\(moved.0) B)")
        #expect(relay.signal(SIGTERM))
    }

    /// The kernel's announcement of a route change wakes the monitor's watch; a burst is one wake.
    @Test func aRouteChangeWakesTheWatch() async throws {
        guard let lab = try NetworkLab.orSkip("route watch in network namespaces") else { return }
        let watch = try lab.onRelaySide { try RouteWatch() }
        defer { watch.stop() }
        let before = watch.wakes
        try lab.route(via: 1)
        let deadline = ContinuousClock.now + .seconds(10)
        while watch.wakes == before, ContinuousClock.now < deadline {
            await watch.changed.wait(timeout: .seconds(1))
        }
        #expect(watch.wakes > before, "no wake within 10 s of moving the route")
    }

    /// Polls status (run in the relay's namespace) until its accounting satisfies `condition`:
    /// the monitor looks every 5 s and its usage is committed with the next held state.
    private func waitForAccounting(_ status: () throws -> JSONObject,
                                   _ condition: ((destination: Double, starlink: Double, iridium: Double)) -> Bool) async throws
        -> (destination: Double, starlink: Double, iridium: Double) {
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let object = try status()
            let uplinks = object["uplinks"]?.array ?? []
            let figures = (destination: object["destinations"]?.array?.first?["wireBytes"]?.number ?? -1,
                           starlink: uplinks.first { $0["name"]?.string == "starlink" }?["wireBytesToday"]?.number ?? -1,
                           iridium: uplinks.first { $0["name"]?.string == "iridium" }?["wireBytesToday"]?.number ?? -1)
            if condition(figures) { return figures }
            guard ContinuousClock.now < deadline else {
                throw RelayProcessError(message: "status's accounting never met the condition within 30 s: \(figures)")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }
}

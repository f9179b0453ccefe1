import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

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
        try world.writeConfig(
            topLevel:
                #"uplinks: [{ name: "starlink", interface: "up0" }, { name: "iridium", interface: "up1", metered: true }],"#,
            traccarURL: "http://\(lab.serverAddress):\(server.http.port)")
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path, lab: lab)
        world.relay = relay
        let status = { try Self.status(world, lab) }
        let waitForLog = { (text: String) in try await Self.waitForLog(text, relay) }

        try await waitForLog("traccar now via starlink (up0)")
        let client = try world.client()
        try client.write((0..<10).map { line("boat", $0) }.joined())
        #expect(client.readLines(10).allSatisfy { $0.hasPrefix("ok ") })
        #expect(await server.waitUntil { $0.count >= 10 })
        let before = try await waitForAccounting(status) { $0.destination > 0 && $0.starlink == $0.destination }
        #expect(before.iridium == 0, "nothing over iridium before the switch: \(before)")
        let counters = (try lab.bytes(uplink: 0), try lab.bytes(uplink: 1))
        #expect(
            counters.0 >= Int64(before.destination),
            "up0 carried at least the HTTP bytes: \(counters.0) < \(before.destination)")

        // The failover: from now on the server is reached over up1, and the relay says so.
        try lab.route(via: 1)
        try await waitForLog("traccar now via iridium (up1, metered)")
        try client.write((10..<20).map { line("boat", $0) }.joined())
        #expect(client.readLines(10).allSatisfy { $0.hasPrefix("ok ") })
        #expect(await server.waitUntil { $0.count >= 20 })
        let after = try await waitForAccounting(status) {
            $0.destination > before.destination && $0.starlink + $0.iridium == $0.destination
        }
        #expect(after.starlink == before.starlink, "starlink carried nothing more: \(before) → \(after)")
        #expect(
            after.iridium == after.destination - before.destination,
            "iridium carried every byte since the switch: \(after)")
        let moved = (try lab.bytes(uplink: 0) - counters.0, try lab.bytes(uplink: 1) - counters.1)
        #expect(moved.1 >= Int64(after.iridium), "up1 carried at least the HTTP bytes: \(moved)")
        #expect(moved.0 < moved.1 / 10, "up0 all but idle after the switch (neighbour probes at most): \(moved)")
        #expect(server.positions.map(\.fixTimeMs) == (0..<20).map(fixTimeMs), "every position once, in order")
        print(
            "uplinks in namespaces: before the switch starlink \(Int(before.starlink)) B (up0 \(counters.0) B on the wire); after it iridium \(Int(after.iridium)) B (up1 +\(moved.1) B, up0 +\(moved.0) B)"
        )
        #expect(relay.signal(SIGTERM))
    }

    /// A kept-alive connection keeps the source address of the route it was opened on,
    /// so after a failover the server's answers to the whole backfill came back over the old
    /// (metered) uplink: 182,708 bytes in the field. Now the forwarder sees the route move, lets
    /// the answers in flight come back and opens new connections over the new route.
    @Test func afterTheRouteMovesNothingOfTheBackfillFlowsOverTheOldUplink() async throws {
        guard let lab = try NetworkLab.orSkip("connections following the route in network namespaces") else { return }
        let server = try lab.onServerSide { try FakeOsmAndServer(host: "0.0.0.0") } // kept alive
        defer { server.http.stop() }
        let world = try RelayWorld()
        try world.writeConfig(
            topLevel:
                #"uplinks: [{ name: "iridium", interface: "up0", metered: true }, { name: "starlink", interface: "up1" }],"#,
            traccarURL: "http://\(lab.serverAddress):\(server.http.port)")
        try lab.shape(uplink: 0, bitsPerSecond: 256_000)
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path, lab: lab)
        world.relay = relay
        try await Self.waitForLog("traccar now via iridium (up0, metered)", relay)
        let client = try world.client()
        let backlog = 3_000
        for start in stride(from: 0, to: backlog, by: 500) {
            try client.write((start..<(start + 500)).map { line("boat", $0) }.joined())
            #expect(client.readLines(500).allSatisfy { $0.hasPrefix("ok ") })
        }
        #expect(await server.waitUntil(timeout: .seconds(60)) { $0.count >= 300 }, "the backlog under way over iridium")
        // The failover, with a backfill under way on kept-alive connections.
        // The relay may have said "now via starlink" already, at its start: only what it says
        // from here on counts.
        let logAtSwitch = relay.stderrText().utf8.count
        try lab.route(via: 1)
        let (up0AtSwitch, up1AtSwitch) = (try lab.bytes(uplink: 0), try lab.bytes(uplink: 1))
        let switched = ContinuousClock.now
        try await Self.waitForLog("traccar now via starlink (up1)", relay, after: logAtSwitch)
        // Until the relay hears of the move (the kernel tells it at once; a loaded machine may
        // run it a second later), what it has on the wire goes on over up0 at up0's pace:
        // that is the machine's, not the relay's, and is reported, not bounded.
        let noticed = ContinuousClock.now - switched
        let up0AtNotice = try lab.bytes(uplink: 0)
        #expect(noticed < .seconds(10), "the relay heard of the route's move \(noticed) after it")
        #expect(
            await server.waitUntil(timeout: .seconds(120)) { $0.count >= backlog },
            "the rest of the backlog over starlink")
        let afterSwitch = (try lab.bytes(uplink: 0) - up0AtSwitch, try lab.bytes(uplink: 1) - up1AtSwitch)
        let afterNotice = try lab.bytes(uplink: 0) - up0AtNotice
        print(
            "uplinks in namespaces: after the route moved, up0 carried \(afterSwitch.0) B (\(afterNotice) B after the relay said so, \(noticed) after the move) and up1 \(afterSwitch.1) B"
        )
        // Once it knows: what was in flight and its answers, and neighbour probes; not the
        // backfill (on kept-alive connections that stayed, up0 carried 125,654 B of it), and not a
        // whole pipelined window queued in the terminal (about 19 KB before the in-flight limit
        // followed the link).
        #expect(
            afterNotice <= 3_000,
            "up0 carried \(afterNotice) B after the relay said the route moved (\(afterSwitch.0) B after the move), up1 \(afterSwitch.1) B"
        )
        #expect(Set(server.positions.map(\.fixTimeMs)).count == backlog, "every position")
        #expect(relay.signal(SIGTERM))
    }

    /// The link's return heard from the kernel: with connection attempts two minutes apart and
    /// probes as far, the route coming back brings an attempt at once, and delivery resumes long
    /// before either was due. While it was away the route led to a gateway nothing answers for,
    /// so attempts failed slowly (a quick refusal would have brought attempts every half second
    /// without the kernel's word: `aRouteTakenAwayIsTriedEveryHalfSecond`).
    @Test func aRouteComingBackIsTriedAtOnce() async throws {
        try await Self.routeGoesAndComesBack(
            "the link's return heard from the kernel", away: { try $0.routeNowhere() },
            // The first attempt has failed: the next is two minutes away, unless the kernel's word brings it.
            announced: "no connection to the destination: trying every 120 s and when the network changes")
    }

    /// The route taken away: each attempt is refused on this side of the uplink (unreachable, at
    /// once), crossing nothing, and the log says attempts go every half second while it is.
    @Test func aRouteTakenAwayIsTriedEveryHalfSecond() async throws {
        try await Self.routeGoesAndComesBack(
            "attempts refused on this side of the uplink", away: { try $0.removeRoute() },
            announced:
                "no connection to the destination: trying every 120 s (every 500 ms while this side of the uplink refuses)"
        )
    }

    /// A relay with attempts and probes two minutes apart delivers one position, loses its route
    /// (`away`), says `announced` after its first attempt fails, and delivers the next within 30 s
    /// of the route's return.
    static func routeGoesAndComesBack(
        _ what: String, away: (NetworkLab) throws -> Void, announced: String
    ) async throws {
        guard let lab = try NetworkLab.orSkip(what) else { return }
        // A new connection per request: one to an unreachable server fails at once.
        let server = try lab.onServerSide { try FakeOsmAndServer(closesAfterEachResponse: true, host: "0.0.0.0") }
        defer { server.http.stop() }
        let world = try RelayWorld()
        try world.writeConfig(
            traccarURL: "http://\(lab.serverAddress):\(server.http.port)",
            link: "backoff: { minSeconds: 120, maxSeconds: 600 }, probe: { intervalSeconds: 300, connectSeconds: 120 }")
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path, lab: lab)
        world.relay = relay
        let client = try world.client()
        try client.write(line("boat", 0))
        #expect(client.readLines(1).allSatisfy { $0.hasPrefix("ok ") })
        #expect(await server.waitUntil { $0.count >= 1 }, "the first position, before the route goes")
        try away(lab)
        try client.write(line("boat", 1))
        #expect(client.readLines(1).allSatisfy { $0.hasPrefix("ok ") })
        try await waitForLog(announced, relay)
        try lab.route(via: 0)
        #expect(
            await server.waitUntil(timeout: .seconds(30)) { $0.count >= 2 },
            "delivered within 30 s of the route's return (attempts and probes were two minutes apart): \(relay.stderrText().suffix(800))"
        )
        #expect(relay.stderrText().contains("a connection to the destination opened"))
        #expect(relay.signal(SIGTERM))
    }

    /// The kernel's announcement of a route change wakes the monitor's watch; a burst is one wake.
    @Test func aRouteChangeWakesTheWatch() async throws {
        guard let lab = try NetworkLab.orSkip("route watch in network namespaces") else { return }
        let watch = try lab.onRelaySide { try RouteWatch() }
        let watching = Task { await watch.run() }
        defer { watching.cancel() }
        let changes = watch.changed.subscribe()
        let before = watch.wakes
        try lab.route(via: 1)
        let deadline = ContinuousClock.now + .seconds(10)
        while watch.wakes == before, ContinuousClock.now < deadline {
            await changes.wait(timeout: .seconds(1))
        }
        #expect(watch.wakes > before, "no wake within 10 s of moving the route")
    }

    /// An uplink with a day budget of 3 KB and a still-alive minimum of a minute: once spent, the
    /// backlog waits (only the newest position per minute goes); when the route moves to the
    /// cheap uplink it drains there, in order, as history, and nothing is lost or sent twice.
    @Test func aSpentBudgetHoldsTheBacklogUntilTheCheapUplinkCarriesIt() async throws {
        guard let lab = try NetworkLab.orSkip("uplink budgets in network namespaces") else { return }
        let server = try lab.onServerSide { try FakeOsmAndServer(closesAfterEachResponse: true, host: "0.0.0.0") }
        defer { server.http.stop() }
        let world = try RelayWorld()
        let budget = 3_000
        try world.writeConfig(
            topLevel: """
                uplinks: [{ name: "iridium", interface: "up0", metered: true, budget: { dayBytes: \(budget) }, send: { minIntervalSeconds: 60 } },
                          { name: "starlink", interface: "up1" }],
                """, traccarURL: "http://\(lab.serverAddress):\(server.http.port)")
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path, lab: lab)
        world.relay = relay
        let status = { try Self.status(world, lab) }
        try await Self.waitForLog("traccar now via iridium (up0, metered)", relay)

        // Live until the budget is spent: each position on a connection of its own bills about
        // 800 bytes (handshake, request, answer, teardown), so a few spend 3 KB; the round is
        // bounded by what is left, so the rest are not sent on a spent budget.
        let interfaceAtStart = try lab.bytes(uplink: 0)
        let client = try world.client()
        try client.write((0..<25).map { line("boat", $0) }.joined())
        #expect(client.readLines(25).allSatisfy { $0.hasPrefix("ok ") })
        try await Self.waitForLog("backlog deferred: iridium's day budget", relay)
        // The answer that spends the budget defers at once; the monitor's accounting shows it spent at its next look.
        let spent = try await Self.waitFor(status, "the destination deferred and the budget counted spent") {
            $0.destination("traccar")?["state"]?.string == "deferred"
                && $0.uplink("iridium")?["budget"]?["spent"] == .bool(true)
        }
        let atSpent = spent.uplink("iridium")?["wireBytesToday"]?.number ?? 0
        let interfaceAtSpent = try lab.bytes(uplink: 0) - interfaceAtStart
        let beforeSpent = server.positions.count
        print(
            "uplink budget in namespaces: iridium counted \(Int(atSpent)) B when spent (\(beforeSpent) positions), the interface \(interfaceAtSpent) B with Ethernet headers"
        )
        // Overrun by at most one request (the round is bounded by what is left), counted as billed.
        #expect(
            atSpent <= Double(budget) * 1.02 + 1_000, "iridium counted \(atSpent) B on a \(budget) B budget when spent")
        #expect(beforeSpent < 25, "the round went on past the budget: \(beforeSpent) positions")
        #expect(spent.uplink("iridium")?["budget"]?["spent"] == .bool(true))

        // Ten minutes of positions while the budget is spent: a still-alive one per minute at most.
        try client.write((25..<625).map { line("boat", $0) }.joined())
        #expect(client.readLines(600).allSatisfy { $0.hasPrefix("ok ") })
        #expect(
            await server.waitUntil { $0.contains { $0.fixTimeMs == fixTimeMs(624) } },
            "the newest position, still alive")
        let deferred = try await Self.waitFor(status, "the backlog counted as deferred") {
            ($0.uplink("iridium")?["deferred"]?.number ?? 0) > 0
        }
        let alive = server.positions.dropFirst(beforeSpent).map(\.fixTimeMs)
        #expect(alive.count <= 11, "at most one position a minute of ten went: \(alive.count)")
        #expect(zip(alive, alive.dropFirst()).allSatisfy { $1 - $0 >= 60_000 }, "a minute apart at least: \(alive)")
        let iridiumBytes =
            try await Self.waitFor(status, "iridium's count to take the still-alive sends") {
                ($0.uplink("iridium")?["wireBytesToday"]?.number ?? 0) >= atSpent
            }.uplink("iridium")?["wireBytesToday"]?.number ?? 0
        // Over the budget by at most what one look lets through (5 s of traffic) and the still-alive sends.
        let allowed: Double = Double(budget) * 1.02 + 1_000 + Double(alive.count) * 1_000
        #expect(iridiumBytes <= allowed, "iridium carried \(iridiumBytes) B on a \(budget) B budget")
        #expect(
            (deferred.destination("traccar")?["pending"]?.number ?? 0) >= Double(600 - alive.count),
            "the backlog is owed, not dropped")

        // Starlink takes the route: the backlog drains over it, oldest first, as history.
        let up1Before = try lab.bytes(uplink: 1)
        try lab.route(via: 1)
        try await Self.waitForLog("traccar now via starlink (up1)", relay)
        #expect(await server.waitUntil(timeout: .seconds(60)) { $0.count >= 625 }, "the backlog over starlink")
        let drained = try await Self.waitFor(status, "nothing pending, online") {
            $0.destination("traccar")?["pending"]?.number == 0
                && $0.destination("traccar")?["state"]?.string == "online"
        }
        let received = server.positions
        #expect(received.count == 625, "every position once: \(received.count)")
        #expect(Set(received.map(\.fixTimeMs)) == Set((0..<625).map(fixTimeMs)), "nothing answered ok was lost")
        let backfill = received.dropFirst(beforeSpent + alive.count)
        #expect(backfill.map(\.fixTimeMs) == backfill.map(\.fixTimeMs).sorted(), "the backfill in order")
        #expect(backfill.allSatisfy { $0.attributes["archive"] == .bool(true) }, "the backfill as history")
        #expect(drained.uplink("iridium")?["deferred"]?.number == 0)
        // The monitor puts the backfill's bytes on starlink at its next look.
        let starlink =
            try await Self.waitFor(status, "starlink's count of the backfill") {
                ($0.uplink("starlink")?["wireBytesToday"]?.number ?? 0) > 0
            }.uplink("starlink")?["wireBytesToday"]?.number ?? 0
        let up1Carried = Double(try lab.bytes(uplink: 1) - up1Before)
        #expect(
            starlink > 0 && up1Carried >= starlink,
            "the backfill went over up1: \(up1Carried) B on the wire for \(starlink) B counted")
        print(
            "uplink budget in namespaces: iridium \(Int(iridiumBytes)) B on a \(budget) B budget (\(alive.count) still-alive positions of 600), starlink \(Int(starlink)) B for the backfill of \(backfill.count)"
        )
        #expect(relay.signal(SIGTERM))
    }

    /// `status --json`, run in the relay's namespace (routes are asked for there).
    private static func status(_ world: RelayWorld, _ lab: NetworkLab) throws -> JSONObject {
        let command = lab.commandOnRelaySide([RelayProcess.binary, "status", "--json", "--config", world.configPath])
        let result = try RelayProcess.run(command.executable, command.arguments, directory: world.directory.path)
        guard result.status == 0, case .object(let object) = try JSONParser.parse(result.stdout) else {
            throw RelayProcessError(
                message: "status --json in the relay's namespace: \(result.status) \(result.stderr)")
        }
        return object
    }

    /// Waits for `text` in the relay's log, in what it wrote past its first `after` bytes.
    private static func waitForLog(_ text: String, _ relay: RelayProcess, after: Int = 0) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while !String(decoding: relay.stderrText().utf8.dropFirst(after), as: UTF8.self).contains(text) {
            guard ContinuousClock.now < deadline else {
                throw RelayProcessError(
                    message: "no '\(text)' in the relay's log within 20 s: \(relay.stderrText().suffix(1500))")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Polls status until `condition` holds, for at most 30 s.
    private static func waitFor(_ status: () throws -> JSONObject, _ what: String, _ condition: (JSONObject) -> Bool)
        async throws -> JSONObject
    {
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let object = try status()
            if condition(object) { return object }
            guard ContinuousClock.now < deadline else {
                throw RelayProcessError(
                    message: "waited 30 s for \(what): \(JSONValue.object(object).jsonText.prefix(1500))")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Polls status (run in the relay's namespace) until its accounting satisfies `condition`:
    /// the monitor looks every 5 s and its usage is committed with the next held state.
    private func waitForAccounting(
        _ status: () throws -> JSONObject,
        _ condition: ((destination: Double, starlink: Double, iridium: Double)) -> Bool
    ) async throws
        -> (destination: Double, starlink: Double, iridium: Double)
    {
        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let object = try status()
            let uplinks = object["uplinks"]?.array ?? []
            let figures = (
                destination: object["destinations"]?.array?.first?["wireBytes"]?.number ?? -1,
                starlink: uplinks.first { $0["name"]?.string == "starlink" }?["wireBytesToday"]?.number ?? -1,
                iridium: uplinks.first { $0["name"]?.string == "iridium" }?["wireBytesToday"]?.number ?? -1
            )
            if condition(figures) { return figures }
            guard ContinuousClock.now < deadline else {
                throw RelayProcessError(message: "status's accounting never met the condition within 30 s: \(figures)")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }
}

extension JSONObject {
    fileprivate func destination(_ name: String) -> JSONValue? {
        self["destinations"]?.array?.first { $0["name"]?.string == name }
    }
    fileprivate func uplink(_ name: String) -> JSONValue? {
        self["uplinks"]?.array?.first { $0["name"]?.string == name }
    }
}

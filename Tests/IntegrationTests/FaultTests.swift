import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

/// Breaking things on purpose (the fault suite's first scenario): the relay is
/// killed with SIGKILL at random moments while 8 collectors write and both a
/// Traccar server and a push gateway receive. Zero acknowledged positions lost.
@Suite(.longOffThePool) struct FaultTests {
    static let cycles = ProcessInfo.processInfo.environment["GEORELAY_LONG_TESTS"] != nil ? 200 : 20

    /// Traccar twice (pipelined OsmAnd, and its Teltonika port) and a push gateway: every transport.
    @Test func sigkillCyclesWithEightCollectorsAndBothDestinations() async throws {
        let world = try RelayWorld()
        let push = try FakePushServer()
        defer { push.http.stop() }
        let teltonika = try FakeTeltonikaServer()
        defer { teltonika.stop() }
        try world.writeConfig(
            moreDestinations: pushDestination(push) + """
                { name: "teltonika", protocol: "teltonika", url: "tcp://127.0.0.1:\(teltonika.port)", filter: { mode: "all" },
                  backoff: { minSeconds: 0.2, maxSeconds: 1 }, probe: { intervalSeconds: 1 } },
                """)
        let devices = (0..<8).map { "unit\($0)" }
        let burst = 300
        var acknowledged: [String: Set<Int64>] = [:]
        var written: [String: Int] = [:]
        var killedMidStream = 0
        let started = ContinuousClock.now
        for _ in 0..<Self.cycles {
            let relay = try world.start()
            let clients = try devices.map { _ in try world.client() }
            let acks = Atomic<Int>(0)
            let target = Int.random(in: 1...(burst * devices.count))
            killRelay(relay.pid, whenAcknowledged: target) { acks.load(ordering: .relaxed) }
            startBurst(burst, devices: devices, clients: clients, written: &written)
            var cut = false
            for (index, device) in devices.enumerated() {
                let i = readAcknowledgements(
                    clients[index], device: device, lines: (written[device]! - burst)..<written[device]!,
                    into: &acknowledged, counting: acks)
                if i < written[device]! { cut = true }
            }
            relay.process.waitUntilExit()
            if cut { killedMidStream += 1 }
        }
        #expect(killedMidStream > 0)
        let cyclesTook = ContinuousClock.now - started
        let final = try world.start()
        let expected = acknowledged
        let total = expected.values.reduce(0) { $0 + $1.count }
        print(
            "fault test: \(Self.cycles) SIGKILL cycles, \(killedMidStream) mid-stream; \(total) positions acknowledged")
        // Every acknowledged position reaches both destinations, at least once. Both are awaited
        // at once: the relay feeds them side by side, so a stall costs one bound, not two.
        // Waited for while they arrive (the long form's drain is hundreds of thousands).
        let drainStarted = ContinuousClock.now
        func timed(_ wait: () async -> Bool) async -> (Bool, Duration) {
            let held = await wait()
            return (held, ContinuousClock.now - drainStarted)
        }
        async let traccar = timed { await world.server.waitForAllWhileArriving(expected) }
        async let gateway = timed { await push.waitForAllWhileArriving(expected) }
        async let teltonikaPort = timed { await teltonika.waitForAllWhileArriving(expected) }
        let drained = await (traccar, gateway, teltonikaPort)
        print(
            "fault test: the cycles took \(cyclesTook); drained at Traccar in \(drained.0.1), the gateway \(drained.1.1), the Teltonika port \(drained.2.1)"
        )
        #expect(drained.0.0, "acknowledged positions missing at Traccar, none arriving for 60 s")
        #expect(drained.1.0, "acknowledged positions missing at the push gateway, none arriving for 60 s")
        #expect(drained.2.0, "acknowledged positions missing at Traccar's Teltonika port, none arriving for 60 s")
        #expect(push.problems.isEmpty)
        try expectNoSecrets(world, relay: final, push: push)
        // Duplicates are bounded by what was in flight at each kill; order per device at Traccar holds.
        let arrivals = world.server.firstArrivals
        print("fault test: \(arrivals.duplicates) duplicates at Traccar over \(Self.cycles) kills")
        var firstAtTeltonika: [String: [Int64]] = [:]
        var seen = Set<String>()
        for position in teltonika.positions where seen.insert("\(position.uniqueId) \(position.fixTimeMs)").inserted {
            firstAtTeltonika[position.uniqueId, default: []].append(position.fixTimeMs)
        }
        for device in devices {
            let times = arrivals.byDevice[device] ?? []
            #expect(DeliveryOrder.problem(times) == nil, "out of order for \(device)")
            let frames = firstAtTeltonika[device] ?? []
            #expect(DeliveryOrder.problem(frames) == nil, "out of order at the Teltonika port for \(device)")
        }
    }

    /// A crash resends a moment's worth, not a state interval's. At the default 15 s
    /// state interval a drain's progress used to be committed every 15 s, so a relay dying more
    /// often than that never kept its progress and resent its backlog from the start at every
    /// life. Now a drain commits its progress within a second: a relay killed every 3 s still
    /// drains its backlog, and each kill repeats about a second of sending.
    @Test func aRelayKilledEveryThreeSecondsStillDrainsItsBacklogAtTheDefaultStateInterval() async throws {
        let long = ProcessInfo.processInfo.environment["GEORELAY_LONG_TESTS"] != nil
        let backlog = long ? 100_000 : 10_000
        let world = try RelayWorld()
        // A link that takes about 12 s (the short form) to carry the backlog: many lives of 3 s.
        // (Its bandwidth is shared by the four connections, as a real link's is.)
        let proxy = try FaultProxy(
            targetPort: world.server.http.port, bytesPerSecond: long ? 1_600_000 : 256_000, latencyMs: 20)
        defer { proxy.stop() }
        try world.writeConfig(spool: "stateSyncSeconds: 15", traccarURL: "http://127.0.0.1:\(proxy.port)/")
        world.server.setBehaviour(.status(503, headers: []))
        var relay = try world.start()
        let devices = (0..<4).map { "drain\($0)" }
        for device in devices {
            let answers = try writeInBatches(try world.client(), device: device, count: backlog / devices.count)
            #expect(answers.allSatisfy { $0.hasPrefix("ok ") })
        }
        relay.signal(SIGKILL)
        world.server.setBehaviour(.normal)
        // As many lives as keep making progress: how much a life of 3 s carries is the machine's
        // (a loaded one starts the relay slower); a relay that resent its backlog from the start
        // at every life would stop gaining new positions, which five lives in a row show.
        var kills = 0
        var reached = 0
        var stalledLives = 0
        while reached < backlog, stalledLives < 5 {
            relay = try world.start()
            usleep(3_000_000) // the scenario itself: a relay that lives three seconds at a time
            relay.signal(SIGKILL)
            kills += 1
            let now = Set(world.server.positions.map { "\($0.uniqueId) \($0.fixTimeMs)" }).count
            stalledLives = now > reached ? 0 : stalledLives + 1
            reached = now
        }
        let unique = Set(world.server.positions.map { "\($0.uniqueId) \($0.fixTimeMs)" }).count
        let duplicates = world.server.positions.count - unique
        print(
            "fault test: \(backlog) positions drained through \(kills) kills 3 s apart at the default state interval; \(duplicates) duplicates (\(kills > 0 ? duplicates / kills : 0) a kill)"
        )
        #expect(
            unique == backlog,
            "\(unique) of \(backlog) delivered after \(kills) lives of 3 s, the last \(stalledLives) gaining nothing")
        let arrivals = world.server.firstArrivals
        for device in devices {
            let times = arrivals.byDevice[device] ?? []
            #expect(DeliveryOrder.problem(times) == nil, "out of order for \(device)")
        }
    }
}

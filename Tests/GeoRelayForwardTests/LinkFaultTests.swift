import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// Each way a link breaks, between the relay and each destination, through the fault proxy.
/// Expected for every mode: nothing quarantined, nothing lost, the destination backs off
/// and probes (no more than the payloads already in flight go out while the link is down),
/// and everything arrives, in order, once the link is back.
@Suite(.longOffThePool) struct LinkFaultTests {

    /// Short timeouts so a black hole costs seconds, not the default 30; a backoff ceiling
    /// longer than the window watched, so the one insurance payload per ceiling
    /// (`NeverStuckTests`) does not fall in it and the probes bring the link back.
    static func shortTimeouts(_ settings: inout Configuration.DestinationSettings) {
        settings.requestTimeoutSeconds = 2
        settings.connectTimeoutSeconds = 1
        settings.probeIntervalSeconds = 0.5
        settings.backoffMaxSeconds = 30
    }

    /// Where what the server took is repeated (at-least-once): a reset after the server took it, or
    /// a terminal that held the requests the relay gave up on and carried them through on the return.
    static func repeats(_ mode: FaultProxy.Mode) -> Bool {
        mode == .resetMidResponse || mode == .hold
    }

    /// Both OsmAnd engines: one request at a time, and pipelined. On a simulated geostationary
    /// link, broken as the fault proxy breaks it on loopback (`SimulatedNetwork.setBroken`).
    @Test(arguments: FaultProxy.Mode.allDown, [1, 32])
    func traccarRidesOutABrokenLink(mode: FaultProxy.Mode, pipeline: Int) async throws {
        let seed = SimulationSeed.all(1)[0]
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 2, pipeline: pipeline) {
            Self.shortTimeouts(&$0)
        }
        let run = f.replay("LinkFaultTests/traccarRidesOutABrokenLink") + ", \(mode), pipeline \(pipeline)"
        let network = f.world.network
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 5) + track("b", count: 5))
            try await f.waitForStatus { $0.pending == 0 }
            network.setBroken(mode)
            _ = await f.spool.append(track("a", count: 20, from: 5) + track("b", count: 20, from: 5))
            let down = try await f.waitForStatus {
                $0.lastError != nil && ($0.state == "backoff" || $0.state == "probing")
            }
            #expect(down.quarantined == 0, "\(mode): \(down.lastError ?? ""), \(run)")
            // Several probe periods with the link down: probes only.
            let postsAtBackoff = network.counters.payloadsWhileDown
            try await f.world.advance(by: .seconds(2))
            #expect(network.counters.payloadsWhileDown == postsAtBackoff, "payloads sent after backing off, \(run)")
            // In flight when it broke, per device: one request at a time, the request and the
            // relay's one retry; pipelined, the window and the suspect's retry.
            let inFlight = pipeline == 1 ? 3 : pipeline + 1
            #expect(postsAtBackoff <= inFlight * 2, "\(postsAtBackoff) payloads, \(run)")
            network.setBroken(.pass)
            let arrived = try await f.waitForArrivals(within: .seconds(60)) {
                Set($0.map { "\($0.uniqueId) \($0.fixTimeMs)" }).count >= 50
            }
            #expect(arrived, "everything arrived, \(run)")
            let after = try await f.waitForStatus { $0.pending == 0 }
            #expect(after.quarantined == 0, "\(run)")
        }
        // Order kept: a reset after the server took positions repeats them (at-least-once: one
        // request at a time repeats one, pipelined a window), and their first arrivals are in order.
        let arrivals = f.traccar.firstArrivals
        for device in ["a", "b"] {
            #expect(arrivals.byDevice[device] == track(device, count: 25).map(\.timeMs), "\(device), \(run)")
        }
        if !Self.repeats(mode) { #expect(arrivals.duplicates == 0, "duplicates, \(run)") }
    }

    /// Traccar's Teltonika port: binary frames, so what went out while down is told apart by the
    /// probe's identification (`FaultProxy.teltonikaProbe`): every other byte is a payload's.
    /// On a simulated geostationary link.
    @Test(arguments: FaultProxy.Mode.allDown)
    func teltonikaRidesOutABrokenLink(mode: FaultProxy.Mode) async throws {
        let seed = SimulationSeed.all(1)[0]
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, transport: .teltonika, concurrency: 2) {
            Self.shortTimeouts(&$0)
        }
        let run = f.replay("LinkFaultTests/teltonikaRidesOutABrokenLink") + ", \(mode)"
        let network = f.world.network
        let server = f.teltonika
        let devices = ["356307042441013", "b"]
        func payloadBytesWhileDown() -> Int {
            let counters = network.counters
            return counters.bytesUpWhileDown - counters.probesWhileDown * FaultProxy.teltonikaProbe.count
        }
        try await f.withForwarder {
            _ = await f.spool.append(devices.flatMap { movingTrack($0, count: 5) })
            try await f.waitForStatus { $0.pending == 0 }
            network.setBroken(mode)
            _ = await f.spool.append(devices.flatMap { movingTrack($0, count: 300, from: 5) })
            let down = try await f.waitForStatus {
                $0.lastError != nil && ($0.state == "backoff" || $0.state == "probing")
            }
            #expect(down.quarantined == 0, "\(mode): \(down.lastError ?? ""), \(run)")
            // Several probe periods with the link down: probes only. Not so when only the answer is
            // reset: the probe's whole answer (one byte) gets through and proves the server, so
            // frames go at full speed, each reset once Traccar took it.
            let payloadAtBackoff = payloadBytesWhileDown()
            try await f.world.advance(by: .seconds(2))
            if mode != .resetMidResponse {
                #expect(payloadBytesWhileDown() == payloadAtBackoff, "payloads sent after backing off, \(run)")
                // A connection refused, unanswered or closed at once carries no probe to count.
                #expect(
                    [.refuse, .drop, .closeAtOnce].contains(mode) || network.counters.probesWhileDown >= 1,
                    "probed, \(run)")
            }
            network.setBroken(.pass)
            let expected = Dictionary(
                uniqueKeysWithValues: devices.map { ($0, Set(movingTrack($0, count: 305).map(\.timeMs))) })
            let arrived = try await f.world.run(for: .seconds(60)) {
                devices.allSatisfy { device in
                    expected[device]!.isSubset(of: server.positions.filter { $0.uniqueId == device }.map(\.fixTimeMs))
                }
            }
            #expect(arrived, "everything arrived, \(run)")
            let after = try await f.waitForStatus { $0.pending == 0 }
            #expect(after.quarantined == 0, "\(run)")
        }
        // Order kept: first arrivals per device in spool order. Only a reset after the server took a
        // frame repeats it (at-least-once).
        var seen: Set<String> = []
        var firsts: [String: [Int64]] = [:]
        var duplicates = 0
        for position in server.positions {
            if seen.insert("\(position.uniqueId) \(position.fixTimeMs)").inserted {
                firsts[position.uniqueId, default: []].append(position.fixTimeMs)
            } else {
                duplicates += 1
            }
        }
        for device in devices {
            #expect(
                DeliveryOrder.problem(firsts[device] ?? [], expected: movingTrack(device, count: 305).map(\.timeMs))
                    == nil, "\(device): order, \(run)")
        }
        if !Self.repeats(mode) { #expect(duplicates == 0, "\(duplicates) duplicates, \(run)") }
    }

    @Test(arguments: FaultProxy.Mode.allDown)
    func pushRidesOutABrokenLink(mode: FaultProxy.Mode) async throws {
        let f = try await PushFixture { settings in Self.shortTimeouts(&settings) }
        let proxy = try FaultProxy(targetPort: f.server.http.port)
        defer { proxy.stop() }
        let direct = f.server.http.url
        let viaProxy = "http://127.0.0.1:\(proxy.port)"
        f.settings.url = f.settings.url.replacingOccurrences(of: direct, with: viaProxy)
        f.settings.push?.authBaseURL = f.server.authBaseURL.replacingOccurrences(of: direct, with: viaProxy)
        f.settings.push?.registrationBaseURL = f.server.registrationBaseURL.replacingOccurrences(
            of: direct, with: viaProxy)
        try await f.withForwarder {
            _ = await f.spool.append(movingTrack("a", count: 10))
            try await f.waitForStatus { $0.pending == 0 }
            proxy.setMode(mode)
            _ = await f.spool.append(movingTrack("a", count: 40, from: 10))
            let down = try await f.waitForStatus {
                $0.lastError != nil && ($0.state == "backoff" || $0.state == "probing")
            }
            #expect(down.quarantined == 0, "\(mode): \(down.lastError ?? "")")
            let postsAtBackoff = proxy.counters.payloadsWhileDown
            try await Task.sleep(for: .seconds(2))
            #expect(proxy.counters.payloadsWhileDown == postsAtBackoff, "\(mode): payloads sent after backing off")
            // The batch in flight, and curl's one resend of it on a fresh connection when the kept-alive one died.
            #expect(postsAtBackoff <= 2, "\(mode): \(proxy.counters.requestsWhileDown)")
            proxy.setMode(.pass)
            #expect(await f.server.waitUntil(timeout: .seconds(20)) { Set($0.map(\.timestamp)).count >= 50 })
            let after = try await f.waitForStatus { $0.pending == 0 }
            #expect(after.quarantined == 0)
        }
        // A reset after the gateway took a batch repeats that batch (at-least-once); first arrivals keep their order.
        var firsts: [String] = []
        for stamp in f.server.points.map(\.timestamp) where !firsts.contains(stamp) { firsts.append(stamp) }
        #expect(
            DeliveryOrder.problem(
                firsts, expected: movingTrack("a", count: 50).map { Timestamp.iso8601(milliseconds: $0.timeMs) })
                == nil,
            "\(mode): order or loss")
        if !Self.repeats(mode) { #expect(f.server.points.count == 50, "\(mode): duplicates") }
        #expect(f.server.problems.isEmpty, "\(f.server.problems)")
    }
}

/// A live fix arriving while a backfill drains over a slow link goes ahead of the
/// history still owed within a couple of seconds, not after the round of history (10 s and more
/// at 256 kbit/s); the history stays `archive=true`, oldest first.
@Suite(.offThePool) struct LiveBeforeHistoryTests {
    /// On a simulated link of about 8 KB/s each way, from two seeds.
    @Test(arguments: [1, 32], SimulationSeed.all(2))
    func aLiveFixOvertakesABackfillInProgress(pipeline: Int, seed: SimulationSeed) async throws {
        // About 8 KB/s each way: the backfill of 600 positions takes well over a minute.
        let link = LinkProfile(name: "8 KB/s", oneWay: .milliseconds(5), bytesPerSecond: 8_000)
        let f = try await SimulatedForwardFixture(link: link, seed: seed, concurrency: 1, pipeline: pipeline) {
            $0.order = .currentFirst
        }
        let run = f.replay("LiveBeforeHistoryTests/aLiveFixOvertakesABackfillInProgress") + ", pipeline \(pipeline)"
        let server = f.traccar
        let newest = track("boat", count: 1, from: 10_000)[0].timeMs
        let live = track("boat", count: 1, from: 20_000)[0].timeMs
        try await f.withForwarder {
            // The server has the vessel at second 10,000 (sent ahead, as a still-alive position is):
            // what follows, seconds 0-599, is history behind it.
            _ = await f.spool.append(track("boat", count: 1, from: 10_000))
            let first = try await f.waitForArrivals(within: .seconds(60)) { $0.count >= 1 }
            #expect(first, "the newest fix, \(run)")
            _ = await f.spool.append(track("boat", count: 600))
            let underWay = try await f.waitForArrivals(within: .seconds(60)) { $0.count >= 20 }
            #expect(underWay, "the backfill under way, \(run)")
            _ = await f.spool.append(track("boat", count: 1, from: 20_000))
            let arrived = try await f.waitForArrivals(within: .seconds(60)) { $0.contains { $0.fixTimeMs == live } }
            #expect(arrived, "the live fix, \(run)")
            let history = server.positions.filter { $0.fixTimeMs < newest }
            // 20 were there when it was stored; at about 60 positions a second, 100 is within 1.5 s
            // (seen: 19 to 35).
            #expect(history.count < 100, "the live fix waited for \(history.count) positions of history, \(run)")
            #expect(history.allSatisfy { $0.attributes["archive"] == .bool(true) }, "\(run)")
            #expect(history.map(\.fixTimeMs) == history.map(\.fixTimeMs).sorted(), "history oldest first, \(run)")
        }
    }
}

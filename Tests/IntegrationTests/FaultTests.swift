import Foundation
import Glibc
import Synchronization
import Testing
import GeoRelayCore
import GeoRelayTestKit

/// Breaking things on purpose (issue 6's suite, first scenario): the relay is
/// killed with SIGKILL at random moments while 8 collectors write and both a
/// Traccar server and a push gateway receive. Zero acknowledged positions lost.
@Suite struct FaultTests {
    static let cycles = ProcessInfo.processInfo.environment["GEORELAY_LONG_TESTS"] != nil ? 200 : 20

    @Test func sigkillCyclesWithEightCollectorsAndBothDestinations() async throws {
        let world = try RelayWorld()
        let push = try FakePushServer()
        defer { push.http.stop() }
        try world.writeConfig(moreDestinations: pushDestination(push))
        let devices = (0..<8).map { "unit\($0)" }
        let burst = 300
        var acknowledged: [String: Set<Int64>] = [:]
        var written: [String: Int] = [:]
        var killedMidStream = 0
        for _ in 0..<Self.cycles {
            let relay = try world.start()
            let clients = try devices.map { _ in try world.client() }
            let acks = Atomic<Int>(0)
            let target = Int.random(in: 1...(burst * devices.count))
            let pid = relay.pid
            Thread {
                let deadline = Date().addingTimeInterval(30)
                while acks.load(ordering: .relaxed) < target, Date() < deadline { usleep(200) }
                kill(pid, SIGKILL)
            }.start()
            for (index, device) in devices.enumerated() {
                let start = written[device, default: 0]
                let text = (start..<(start + burst)).map { line(device, $0) }.joined()
                let client = clients[index]
                Thread { try? client.write(text) }.start()
                written[device] = start + burst
            }
            var cut = false
            for (index, device) in devices.enumerated() {
                let i = readAcknowledgements(clients[index], device: device, lines: (written[device]! - burst)..<written[device]!,
                                             into: &acknowledged, counting: acks)
                if i < written[device]! { cut = true }
            }
            relay.process.waitUntilExit()
            if cut { killedMidStream += 1 }
        }
        #expect(killedMidStream > 0)
        let final = try world.start()
        let expected = acknowledged
        let total = expected.values.reduce(0) { $0 + $1.count }
        print("fault test: \(Self.cycles) SIGKILL cycles, \(killedMidStream) mid-stream; \(total) positions acknowledged")
        // Every acknowledged position reaches both destinations, at least once.
        let traccar = await world.server.waitUntil(timeout: .seconds(120)) { stored in
            devices.allSatisfy { d in expected[d, default: []].isSubset(of: Set(stored.filter { $0.uniqueId == d }.map(\.fixTimeMs))) }
        }
        #expect(traccar, "acknowledged positions missing at Traccar")
        let gateway = await push.waitUntil(timeout: .seconds(120)) { points in
            devices.allSatisfy { d in
                let times = Set(points.filter { $0.trackerId == "\(d)@alice" }.compactMap { Timestamp.milliseconds(fromISO8601: $0.timestamp) })
                return expected[d, default: []].isSubset(of: times)
            }
        }
        #expect(gateway, "acknowledged positions missing at the push gateway")
        #expect(push.problems.isEmpty)
        try expectNoSecrets(world, relay: final, push: push)
        // Duplicates are bounded by what was in flight at each kill; order per device at Traccar holds.
        let stored = world.server.positions
        let duplicates = stored.count - Set(stored.map { "\($0.uniqueId) \($0.fixTimeMs)" }).count
        print("fault test: \(duplicates) duplicates at Traccar over \(Self.cycles) kills")
        for device in devices {
            var last: Int64 = .min
            var seen = Set<Int64>()
            for time in stored.filter({ $0.uniqueId == device }).map(\.fixTimeMs) where !seen.contains(time) {
                #expect(time > last, "out of order for \(device)")
                last = time
                seen.insert(time)
            }
        }
    }
}

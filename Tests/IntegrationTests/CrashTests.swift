import Foundation
import Glibc
import Testing
import GeoRelayCore
import GeoRelayTestKit

/// The promise: a position answered `ok` is never lost, whatever happens to the relay.
@Suite struct CrashTests {
    /// Collectors pipeline positions with acks on while the relay is killed with
    /// SIGKILL; after a restart every acknowledged position reaches the server,
    /// in per-device order.
    @Test func sigkillLosesNothingThatWasAcknowledged() async throws {
        let world = try RelayWorld()
        var acknowledged: [String: Set<Int64>] = [:]
        var written: [String: Int] = [:]
        var cutShort = 0
        let devices = (0..<4).map { "dev\($0)" }
        for round in 0..<5 {
            try world.start()
            let clients = try devices.map { _ in try world.client() }
            // Each collector writes a burst without waiting, then reads what came back.
            let killer = Thread {
                usleep(UInt32.random(in: 20_000...150_000))
                world.relay.map { kill($0.pid, SIGKILL) }
            }
            killer.start()
            for (index, device) in devices.enumerated() {
                let start = written[device, default: 0]
                try? clients[index].write((start..<(start + 2_000)).map { line(device, $0) }.joined())
                written[device] = start + 2_000
            }
            for (index, device) in devices.enumerated() {
                let start = written[device]! - 2_000
                var i = start
                while let reply = clients[index].readLine() {
                    if reply.hasPrefix("ok ") { acknowledged[device, default: []].insert(fixTimeMs(i)) }
                    i += 1
                }
                if i < written[device]! { cutShort += 1 }
            }
            world.relay?.process.waitUntilExit()
            _ = round
        }
        try world.start()
        let total = acknowledged.values.reduce(0) { $0 + $1.count }
        #expect(total > 0)
        // The kills must have landed while collectors were still being answered.
        #expect(cutShort > 0)
        print("crash test: \(total) acknowledged of \(written.values.reduce(0, +)) written; \(cutShort) collector streams cut by SIGKILL")
        let expected = acknowledged
        let arrived = await world.server.waitUntil(timeout: .seconds(60)) { stored in
            devices.allSatisfy { device in expected[device, default: []].isSubset(of: Set(stored.filter { $0.uniqueId == device }.map(\.fixTimeMs))) }
        }
        #expect(arrived, "acknowledged positions missing at the server")
        for device in devices {
            let times = world.server.positions.filter { $0.uniqueId == device }.map(\.fixTimeMs)
            // Resends after a crash may repeat a position, but never go back in time past one already delivered.
            var seen = Set<Int64>()
            var last: Int64 = .min
            for time in times where !seen.contains(time) {
                #expect(time > last, "out of order for \(device)")
                last = time
                seen.insert(time)
            }
        }
    }
}

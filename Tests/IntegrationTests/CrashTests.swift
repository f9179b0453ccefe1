import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

/// The promise: a position answered `ok` is never lost, whatever happens to the relay.
@Suite(.offThePool) struct CrashTests {
    /// Collectors pipeline positions with acks on while the relay is killed with
    /// SIGKILL; after a restart every acknowledged position reaches the server,
    /// in per-device order.
    @Test func sigkillLosesNothingThatWasAcknowledged() async throws {
        // The default: acknowledgements held in memory for up to 15 s, positions in their commit window.
        let world = try RelayWorld(spool: "stateSyncSeconds: 15, commitWindowMs: 900")
        var acknowledged: [String: Set<Int64>] = [:]
        var written: [String: Int] = [:]
        var cutShort = 0
        let devices = (0..<4).map { "dev\($0)" }
        let burst = 2_000
        for _ in 0..<5 {
            let relay = try world.start()
            let clients = try devices.map { _ in try world.client() }
            // Kill once a random number of acknowledgements has been read: mid-stream, whatever the machine's speed.
            let acks = Atomic<Int>(0)
            let target = Int.random(in: 1...(burst * devices.count / 2))
            killRelay(relay.pid, whenAcknowledged: target) { acks.load(ordering: .relaxed) }
            startBurst(burst, devices: devices, clients: clients, written: &written)
            // Read every collector's replies in turn, until all are in or the killed relay's end closes.
            for (index, device) in devices.enumerated() {
                let i = readAcknowledgements(
                    clients[index], device: device, lines: (written[device]! - burst)..<written[device]!,
                    into: &acknowledged, counting: acks)
                if i < written[device]! { cutShort += 1 }
            }
            relay.process.waitUntilExit()
            #expect(relay.process.terminationReason == .uncaughtSignal)
        }
        try world.start()
        let total = acknowledged.values.reduce(0) { $0 + $1.count }
        #expect(total > 0)
        // The kills must have landed while collectors were still being answered.
        #expect(cutShort > 0)
        print(
            "crash test: \(total) acknowledged of \(written.values.reduce(0, +)) written; \(cutShort) collector streams cut by SIGKILL"
        )
        let expected = acknowledged
        let arrived = await world.server.waitForAll(expected, timeout: .seconds(120))
        #expect(arrived, "acknowledged positions missing at the server")
        for device in devices {
            // Resends after a crash may repeat a position; what is new keeps the delivery order
            // (the current position, then history oldest first).
            #expect(world.server.orderProblem(device, archive: false) == nil)
        }
    }
}

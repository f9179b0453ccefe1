import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

/// The relay restarts, under load, on a large spool (a fleet of 100 units after a long outage:
/// 200,000 positions, 1,000,000 in the long form). It accepts collectors again within a second of
/// starting, drains with bounded memory, serves live devices while the backlog drains, and
/// survives SIGKILLs in the middle of the drain (one in the short form, three in the long one).
@Suite(.longOffThePool) struct LargeSpoolTests {
    static let long = ProcessInfo.processInfo.environment["GEORELAY_LONG_TESTS"] != nil
    static let backlogDevices = 100
    static let perDevice = long ? 10_000 : 1_000
    /// Positions drained between kills: a tenth of the spool in the short form.
    static let chunk = long ? 60_000 : 10_000

    /// Writes the backlog through the spool's own API, as a relay that was offline would have.
    static func fillSpool(at path: String) async throws {
        let spool = try Spool(settings: Spool.Settings(path: path))
        try await spool.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        for second in stride(from: 0, to: perDevice, by: 100) {
            var batch: [Position] = []
            batch.reserveCapacity(backlogDevices * 100)
            for device in 0..<backlogDevices {
                for s in second..<(second + 100) {
                    batch.append(
                        Position(
                            device: "unit\(device)", timeMs: fixTimeMs(s), lat: 59 + Double(s) * 1e-5,
                            lon: 10 + Double(device) * 1e-3, speed: 1.5))
                }
            }
            _ = await spool.append(batch)
        }
        spool.close()
    }

    /// How long the drain may stop moving before it fails: it is waited for as long as positions
    /// keep arriving (its pace is the machine's: 60,000 took 6 to 18 s alone on the 2-core CI
    /// machine and over a minute under the whole suite's load), and a stall fails within a minute.
    static let stallBound = Duration.seconds(60)

    @Test func restartOnALargeSpoolAcceptsAtOnceAndDrainsInBoundedMemory() async throws {
        let world = try RelayWorld()
        let filling = WallClock.monotonicNs()
        try await Self.fillSpool(at: world.spoolPath)
        let fillSeconds = Double(WallClock.monotonicNs() - filling) / 1e9
        let total = Self.backlogDevices * Self.perDevice
        // Each cycle drains another chunk of the backlog, then the relay is killed while collectors write.
        let cycles = Self.long ? 3 : 1

        // Live collectors keep writing across both restarts.
        let writing = Atomic<Bool>(true)
        defer { writing.store(false, ordering: .relaxed) } // a failed wait leaves no writer behind
        let acknowledged = Mutex<[String: Set<Int64>]>([:])
        let collectors = DispatchGroup()
        func startCollectors() throws {
            for device in (0..<4).map({ "live\($0)" }) {
                // The reply timeout ends a reader whose relay stalls.
                let seconds = 30
                let client = try UnixLineClient(path: world.socketPath, receiveTimeoutSeconds: seconds)
                try client.write(#"{"hello":{"ack":true}}"# + "\n")
                guard client.readLine() != nil else {
                    throw RelayProcessError(message: "\(device): no answer to its hello within \(seconds) s")
                }
                let first = acknowledged.withLock { $0[device]?.count ?? 0 }
                Thread {
                    var i = first
                    while writing.load(ordering: .relaxed) {
                        try? client.write(line(device, i))
                        i += 1
                        usleep(200_000) // 5 Hz: a fast receiver, still a fair share of the drain
                    }
                    client.finishWriting()
                }.start()
                DispatchQueue.global().async(group: collectors) {
                    var i = first
                    while let reply = client.readLine() {
                        if reply.hasPrefix("ok ") {
                            _ = acknowledged.withLock { $0[device, default: []].insert(fixTimeMs(i)) }
                        }
                        i += 1
                    }
                }
            }
        }
        /// Waits until every collector's reader has seen the relay's end of its stream.
        func collectorsEnded(_ after: String) async throws {
            let bound = Duration.seconds(30)
            let seconds = 30.0
            let ended = await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    continuation.resume(returning: collectors.wait(timeout: .now() + seconds) == .success)
                }
            }
            try #require(ended, "the live collectors' streams did not end within \(bound) of \(after)")
        }

        var acceptSeconds: [Double] = []
        var drainSeconds: [Double] = []
        var peakRSS = 0
        /// Starts the relay and measures how long until its socket accepts a collector.
        func start() throws -> RelayProcess {
            let launched = WallClock.monotonicNs()
            let relay = try world.start(timeout: .seconds(10))
            acceptSeconds.append(Double(WallClock.monotonicNs() - launched) / 1e9)
            return relay
        }
        /// Waits until another chunk of positions has arrived at Traccar, for as long as they arrive.
        func drain(_ chunk: Int, relay: RelayProcess) async throws {
            let began = WallClock.monotonicNs()
            let target = world.server.positions.count + Self.chunk
            let drained = await world.server.waitWhileArriving(stalledFor: Self.stallBound) { $0.count >= target }
            drainSeconds.append(Double(WallClock.monotonicNs() - began) / 1e9)
            try #require(
                drained,
                """
                drain \(chunk) of \(cycles + 1): \(world.server.positions.count) of \(target) positions at Traccar, none for \(Self.stallBound); \
                the relay's status: \((try? world.command(["status"]).stdout) ?? "unknown")
                its log's tail:
                \(relay.stderrText().split(separator: "\n").suffix(40).joined(separator: "\n"))
                """
            )
        }

        var relay = try start()
        try startCollectors()
        for cycle in 0..<cycles {
            try await drain(cycle + 1, relay: relay)
            peakRSS = max(peakRSS, try residentBytes(pid: relay.pid, peak: true))
            relay.signal(SIGKILL)
            writing.store(false, ordering: .relaxed)
            try await collectorsEnded("the SIGKILL")
            writing.store(true, ordering: .relaxed)
            relay = try start()
            try startCollectors()
        }
        try await drain(cycles + 1, relay: relay)
        writing.store(false, ordering: .relaxed)
        try await collectorsEnded("the collectors' last line")
        let live = acknowledged.withLock { $0 }
        let liveTotal = live.values.reduce(0) { $0 + $1.count }
        // Live devices are served while the backlog drains, not after it: every live position is at
        // Traccar while some of the backlog is not yet, however slowly a loaded machine drains;
        // waited for as long as the drain moves (it serves the live devices' own backlogs in their turns).
        let liveArrived = await world.server.waitWhileArriving(stalledFor: Self.stallBound) { stored in
            var missing = live
            for position in stored { missing[position.uniqueId]?.remove(position.fixTimeMs) }
            return missing.values.allSatisfy(\.isEmpty)
        }
        let backlogThen = world.server.firstArrivals.byDevice.filter { $0.key.hasPrefix("unit") }.values
            .reduce(0) { $0 + $1.count }
        // What is missing, and whether the relay still has it pending (slow) or not (lost).
        var missing = live
        for position in world.server.positions { missing[position.uniqueId]?.remove(position.fixTimeMs) }
        let pending = (try? SpoolReader.open(path: world.spoolPath).pendingDevices(destination: "traccar"))?
            .filter { $0.device.hasPrefix("live") }.map { "\($0.device): \($0.pending)" }
        #expect(
            liveArrived,
            "live collectors' positions not all at Traccar, none arriving for \(Self.stallBound): missing \(missing.mapValues(\.count).filter { $0.value > 0 }) (oldest \(missing.mapValues { $0.min() ?? 0 }.filter { $0.value > 0 })), pending in the spool \(pending ?? ["unknown"]), \(world.server.positions.count) positions at Traccar; the relay's status: \((try? world.command(["status"]).stdout) ?? "unknown"); its log's tail: \(relay.stderrText().split(separator: "\n").suffix(40).joined(separator: "\n"))"
        )
        #expect(
            backlogThen < total,
            "live collectors' positions waited behind the whole backlog (\(backlogThen) of \(total) at Traccar when they were all there)"
        )
        peakRSS = max(peakRSS, try residentBytes(pid: relay.pid, peak: true))

        // Ledger for the backlog: each device's track from its start, in order and with no gap,
        // across every kill: first in order (`order: auto`), then, once the current position went
        // ahead, as history behind it (repeats after a kill are counted, not failed).
        let (firsts, duplicates) = world.server.firstArrivals
        let delivered = firsts.values.reduce(0) { $0 + $1.count }
        for device in (0..<Self.backlogDevices).map({ "unit\($0)" }) {
            let times = firsts[device] ?? []
            let history = DeliveryOrder.history(times)
            #expect(world.server.orderProblem(device, archive: false) == nil)
            // All but the newest, which went ahead when the history gave way (the test drains
            // a fifth of the spool: no device's history reaches its newest).
            let start = times.filter { $0 != fixTimeMs(Self.perDevice - 1) }
            let missing = Set((0..<start.count).map(fixTimeMs)).subtracting(start).sorted()
            #expect(
                start.sorted() == (0..<start.count).map(fixTimeMs),
                "\(device): a gap or a reordering in what arrived: seconds \(missing.prefix(5).map { ($0 - fixTimeMs(0)) / 1000 }) missing of \(start.count), \(history.count) of them as history"
            )
        }
        // Bounded: holding the backlog would take hundreds of MiB.
        #expect(peakRSS < 96 << 20, "peak RSS \(peakRSS >> 20) MiB")
        #expect(acceptSeconds.allSatisfy { $0 < 1 }, "accepting after \(acceptSeconds) s")
        print(
            """
            large spool: \(total) spooled in \(String(format: "%.1f", fillSeconds)) s; accepting \(acceptSeconds.map { String(format: "%.2f", $0) }.joined(separator: " and ")) s \
            after each start (\(cycles) after a SIGKILL mid-drain); \(Self.chunk) drained in \(drainSeconds.map { String(format: "%.1f", $0) }.joined(separator: " and ")) s; \
            \(delivered) delivered without a gap incl. \(liveTotal) live positions \
            from 4 collectors, all of them; \(duplicates) repeats after the kills; peak RSS \(peakRSS >> 20) MiB
            """)
    }
}

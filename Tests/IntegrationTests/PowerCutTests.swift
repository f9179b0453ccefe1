import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

/// Scenario "a power cut, not only a crash". `kill -9` proves the relay's own logic but
/// not its fsync discipline: the kernel keeps every write of a killed process. Here the spool and
/// the push destination's token file live on `LazyFS`, which keeps what was not fsynced in memory
/// and loses it at the cut, so only what the relay made durable is there when it comes back.
@Suite(.longOffThePool) struct PowerCutTests {
    static let cuts = ProcessInfo.processInfo.environment["GEORELAY_LONG_TESTS"] != nil ? 500 : 20

    static func filesystem(_ test: String = #function) throws -> LazyFS? {
        do {
            return try LazyFS()
        } catch let error as LazyFSUnavailable {
            print(
                "power cut \(test): SKIPPED, \(error.reason); run as root where /dev/fuse exists, after make deps, to cover it"
            )
            return nil
        }
    }

    /// Each cycle: the relay starts on the lazy filesystem, 4 collectors write a burst with acks
    /// while Traccar and a push gateway receive, and at a random acknowledgement the power goes
    /// (the filesystem's daemon and the relay are SIGKILLed together). What the disk then holds
    /// must open cleanly (integrity check, delivery state, token file) and hold every position
    /// answered `ok`; at the end both destinations have them all, each device in order.
    @Test func powerCutsWhileCollectorsWriteAndDestinationsDrainLoseNothingAcknowledged() async throws {
        guard let filesystem = try Self.filesystem() else { return }
        let world = try RelayWorld(spoolDirectory: filesystem.mountPoint)
        // Whatever fails, the relay goes before the filesystem it uses, and the filesystem is unmounted.
        defer {
            world.relay?.signal(SIGKILL)
            try? filesystem.unmount()
        }
        let push = try FakePushServer()
        defer { push.http.stop() }
        try world.writeConfig(
            spool: "stateSyncSeconds: 15, commitWindowMs: 900", moreDestinations: pushDestination(push))
        let scratch = try TemporaryDirectory()
        let devices = (0..<4).map { "boat\($0)" }
        let burst = 600
        var acknowledged: [String: Set<Int64>] = [:]
        var written: [String: Int] = [:]
        var midStream = 0
        var whileDraining = 0
        var tokenFilesAfterCuts = 0
        var tokenWasDurable = false
        let started = ContinuousClock.now
        for cut in 1...Self.cuts {
            let tokensBefore = push.tokensIssued
            let relay = try world.start()
            let clients = try devices.map { _ in try world.client() }
            let acks = AcknowledgementCounter()
            let target = Int.random(in: 1...(burst * devices.count))
            cutPower(filesystem: filesystem.daemonPID, relay: relay.pid, whenAcknowledged: target) { acks.value }
            let answered = try writeWithWindows(
                clients, devices: devices, from: written, count: burst, window: 20, counting: acks)
            // Every device writes the same lines, so one fix time starts this cut's positions for all of them.
            let firstFix = fixTimeMs(written[devices[0], default: 0])
            var answeredNow: [String: Set<Int64>] = [:]
            for device in devices {
                answeredNow[device] = Set(answered[device]?.acknowledged ?? [])
                acknowledged[device, default: []].formUnion(answeredNow[device]!)
                written[device, default: 0] += burst
            }
            let total = acknowledged.values.reduce(0) { $0 + $1.count }
            if answered.values.contains(where: { $0.replies < burst }) { midStream += 1 }
            try awaitExit(relay, what: "the relay after cut \(cut)")

            try filesystem.remount()
            let disk = try DurableState(backing: filesystem.backing, scratch: scratch, fixTimesFrom: firstFix)
            try #require(disk.integrity == "ok", "cut \(cut): the spool does not open cleanly: \(disk.integrity)")
            // This cut's positions one by one; the earlier ones by their number (the export at the end checks each).
            let lost = answeredNow.reduce(0) { $0 + $1.value.subtracting(disk.positions[$1.key] ?? []).count }
            try #require(lost == 0, "cut \(cut): \(lost) positions answered ok are not on the disk")
            try #require(
                disk.rows >= total, "cut \(cut): the disk holds \(disk.rows) positions, \(total) were answered ok")
            #expect(disk.cursorsAhead.isEmpty, "cut \(cut): delivery state past the spool: \(disk.cursorsAhead)")
            #expect(disk.tokenFile != .unreadable, "cut \(cut): the token file does not parse")
            // Once the token is on the disk it stays there, and a relay that finds it does not log in again.
            #expect(!(tokenWasDurable && disk.tokenFile != .valid), "cut \(cut): the token file was lost")
            #expect(
                !tokenWasDurable || push.tokensIssued == tokensBefore,
                "cut \(cut): the relay authenticated again with a token on the disk")
            if disk.tokenFile == .valid { tokenFilesAfterCuts += 1 }
            tokenWasDurable = disk.tokenFile == .valid
            // The operator's view opens it too, before the relay touches it again; what it shows
            // pending is what the destinations were still draining when the power went.
            let status = try world.statusJSON()
            #expect(status["spool"]?["rows"]?.number == Double(disk.rows), "cut \(cut): status and the disk disagree")
            if status["destinations"]?.array?.contains(where: { ($0["pending"]?.number ?? 0) > 0 }) == true {
                whileDraining += 1
            }
            if cut % 50 == 0, cut < Self.cuts {
                print("power cut: \(cut) of \(Self.cuts) cuts, \(total) acknowledged, \(ContinuousClock.now - started)")
            }
        }
        let cutsTook = ContinuousClock.now - started
        let final = try world.start()
        let expected = acknowledged
        let total = expected.values.reduce(0) { $0 + $1.count }
        // Waited for while they arrive (the long form's drain is hundreds of thousands).
        async let traccar = world.server.waitForAllWhileArriving(expected)
        async let gateway = push.waitForAllWhileArriving(expected)
        #expect(await traccar, "acknowledged positions missing at Traccar, none arriving for 60 s")
        #expect(await gateway, "acknowledged positions missing at the push gateway, none arriving for 60 s")
        #expect(push.problems.isEmpty, "\(push.problems.prefix(3))")
        try expectNoSecrets(world, relay: final, push: push)

        // In the spool as the operator exports it.
        let export = try world.command(["export", "--format", "csv"])
        #expect(export.status == 0, "\(export.stderr)")
        var exported: [String: Set<Int64>] = [:]
        for row in export.stdout.split(separator: "\n").dropFirst() {
            let fields = row.split(separator: ",", omittingEmptySubsequences: false)
            guard fields.count > 2, let ms = Timestamp.milliseconds(fromISO8601: String(fields[1])) else { continue }
            exported[String(fields[0]), default: []].insert(ms)
        }
        let notExported = expected.reduce(0) { $0 + $1.value.subtracting(exported[$1.key] ?? []).count }
        #expect(notExported == 0, "\(notExported) acknowledged positions missing from georelay export")

        let arrivals = world.server.firstArrivals
        for device in devices {
            let times = arrivals.byDevice[device] ?? []
            #expect(DeliveryOrder.problem(times) == nil, "out of order at Traccar for \(device)")
        }
        let gatewayDuplicates = push.points.count - Set(push.points.map { "\($0.trackerId) \($0.timestamp)" }).count
        #expect(midStream > 0)
        // The relay authenticates within a cycle's first tenth: some cut came after its token was saved.
        #expect(
            tokenFilesAfterCuts > 0, "no cut left a token file: a restart after each power cut costs an authentication")
        print(
            """
            power cut: \(Self.cuts) cuts (\(midStream) mid-stream, \(whileDraining) while a destination drained) in \(cutsTook); \
            \(total) positions acknowledged, 0 lost; duplicates \(arrivals.duplicates) at Traccar, \(gatewayDuplicates) at the gateway; \
            \(push.tokensIssued) tokens issued, a token file after \(tokenFilesAfterCuts) cuts
            """)
    }

    /// `georelay token refresh` while the relay runs, then the power goes: the refreshed token is
    /// the one on the disk after it. Written beside, fsynced and renamed into place, it is
    /// durable only once the directory is fsynced too.
    @Test func aTokenRefreshedJustBeforeACutIsTheOneAfterIt() async throws {
        guard let filesystem = try Self.filesystem() else { return }
        let world = try RelayWorld(spoolDirectory: filesystem.mountPoint)
        // Whatever fails, the relay goes before the filesystem it uses, and the filesystem is unmounted.
        defer {
            world.relay?.signal(SIGKILL)
            try? filesystem.unmount()
        }
        let push = try FakePushServer()
        defer { push.http.stop() }
        try world.writeConfig(
            spool: "stateSyncSeconds: 15, commitWindowMs: 900", moreDestinations: pushDestination(push))
        let relay = try world.start()
        let client = try world.client()
        try client.write(line("boat", 0))
        #expect(client.readLine()?.hasPrefix("ok ") == true)
        #expect(
            await push.waitForAll(["boat": [fixTimeMs(0)]], timeout: .seconds(30)),
            "the first position never reached the gateway")
        let refresh = try world.command(["token", "refresh"])
        #expect(refresh.status == 0, "\(refresh.stderr)")
        let store = TokenStore(spoolPath: world.spoolPath, destination: "gw")
        let refreshed = try #require(store.load()?.value, "no token file after the refresh")

        filesystem.cut()
        relay.signal(SIGKILL)
        try filesystem.remount()
        #expect(
            store.load()?.value == refreshed,
            "after the cut the token file holds \(store.load() == nil ? "nothing" : "the token from before the refresh")"
        )
        #expect(push.tokensIssued == 2)
    }
}

/// SIGKILLs the filesystem's daemon and the relay, back to back, from a thread as soon as
/// `acknowledged()` reaches `target` (or after 30 s): the power cut.
func cutPower(
    filesystem: Int32, relay: Int32, whenAcknowledged target: Int, _ acknowledged: @escaping @Sendable () -> Int
) {
    Thread {
        let deadline = Date().addingTimeInterval(30)
        while acknowledged() < target, Date() < deadline { usleep(200) }
        Glibc.kill(filesystem, SIGKILL)
        Glibc.kill(relay, SIGKILL)
    }.start()
}

/// Each collector on its own thread writes its device's next `count` lines from `start`, at
/// most `window` unanswered at a time, as a collector with a bounded window does: the relay
/// answers in many group commits, so a cut at a random acknowledgement lands mid-stream.
/// Returns per device the fix times answered `ok` and how many replies came before the end of
/// the stream; waits at most 60 s for the collectors.
func writeWithWindows(
    _ clients: [UnixLineClient], devices: [String], from start: [String: Int], count: Int, window: Int,
    counting acks: AcknowledgementCounter
) throws -> [String: (acknowledged: [Int64], replies: Int)] {
    let results = Mutex<[String: (acknowledged: [Int64], replies: Int)]>([:])
    let done = DispatchSemaphore(value: 0)
    for (client, device) in zip(clients, devices) {
        let first = start[device, default: 0]
        Thread {
            var acknowledged: [Int64] = []
            var replies = 0
            var next = first
            writing: while next < first + count {
                let size = min(window, first + count - next)
                guard (try? client.write((next..<(next + size)).map { line(device, $0) }.joined())) != nil else {
                    break
                }
                for i in next..<(next + size) {
                    guard let reply = client.readLine() else { break writing }
                    replies += 1
                    if reply.hasPrefix("ok ") {
                        acknowledged.append(fixTimeMs(i))
                        acks.add()
                    }
                }
                next += size
            }
            results.withLock { $0[device] = (acknowledged, replies) }
            done.signal()
        }.start()
    }
    for device in devices where done.wait(timeout: .now() + 60) == .timedOut {
        throw RelayProcessError(message: "a collector (of \(device) or another) was still writing after 60 s")
    }
    return results.withLock { $0 }
}

/// Acknowledgements read so far, shared by the collectors' threads and the one that cuts.
final class AcknowledgementCounter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Waits (at most 30 s) for a killed relay to be gone.
func awaitExit(_ relay: RelayProcess, what: String) throws {
    guard relay.process.exited(within: .seconds(30)) else {
        throw RelayProcessError(message: "waited 30 s for \(what) to exit")
    }
}

/// What a power cut left on the disk, read from a copy of the backing directory so that the
/// relay, started next, finds the disk exactly as the cut left it.
struct DurableState {
    enum TokenFile: Equatable { case absent, valid, unreadable }

    /// `PRAGMA integrity_check`'s answer ("ok"), or why the spool did not open.
    var integrity = "ok"
    /// Every position on the disk.
    var rows = 0
    /// Per device, the fix times on the disk from `fixTimesFrom` on.
    var positions: [String: Set<Int64>] = [:]
    /// Delivery cursors naming a position the spool never numbered.
    var cursorsAhead: [String] = []
    var tokenFile = TokenFile.absent

    init(backing: String, scratch: TemporaryDirectory, fixTimesFrom: Int64) throws {
        let manager = FileManager.default
        let copy = scratch.file("spool.db")
        for suffix in ["", "-wal", "-shm"] where manager.fileExists(atPath: copy + suffix) {
            try manager.removeItem(atPath: copy + suffix)
        }
        // The -shm file is rebuilt from the WAL by whoever opens the database first.
        for suffix in ["", "-wal"] where manager.fileExists(atPath: "\(backing)/spool.db\(suffix)") {
            try manager.copyItem(atPath: "\(backing)/spool.db\(suffix)", toPath: copy + suffix)
        }
        let token = "\(backing)/gw.token"
        if manager.fileExists(atPath: token) {
            tokenFile =
                TokenStore(spoolPath: "\(backing)/spool.db", destination: "gw").load() == nil ? .unreadable : .valid
        }
        guard manager.fileExists(atPath: copy) else { return }
        do {
            let db = try SQLiteDatabase(path: copy)
            integrity = try db.pragma("integrity_check") ?? "no answer"
            guard integrity == "ok" else { return }
            // Before the relay's first commit the file exists but holds no schema yet.
            guard try db.pragma("user_version") != "0" else { return }
            let count = try db.statement("SELECT (SELECT count(*) FROM positions) + (SELECT count(*) FROM recent)")
            if try count.step() { rows = count.int(0) }
            // A position lives in `positions` or, until the writer merges it, in `recent`.
            let recent = try db.statement(
                """
                SELECT d.name, p.fix_ms FROM positions p JOIN devices d ON d.id = p.device_id WHERE p.fix_ms >= ?1
                UNION ALL SELECT d.name, p.fix_ms FROM recent p JOIN devices d ON d.id = p.device_id WHERE p.fix_ms >= ?1
                """)
            recent.bind(1, fixTimesFrom)
            while try recent.step() { positions[recent.text(0) ?? "", default: []].insert(recent.int64(1)) }
            let cursors = try db.statement(
                """
                SELECT c.destination, c.device_id, c.acked_seq FROM cursors c
                WHERE c.acked_seq > max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'positions'), 0),
                                        coalesce((SELECT max(seq) FROM recent), 0))
                """)
            while try cursors.step() {
                cursorsAhead.append("\(cursors.text(0) ?? "") device \(cursors.int64(1)) at \(cursors.int64(2))")
            }
        } catch {
            integrity = "\(error)"
        }
    }
}

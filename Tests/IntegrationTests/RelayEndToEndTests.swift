import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

@Suite(.offThePool) struct RelayEndToEndTests {
    @Test func positionsWrittenToTheSocketArriveAtTraccarAsSent() async throws {
        let world = try RelayWorld()
        try world.start()
        let client = try world.client()
        try client.write(#"{"hello":{"device":"gps-bow","ack":true}}"# + "\n")
        try client.write(
            #"{"time":"2026-07-25T04:30:00Z","lat":59.5,"lon":10.25,"speed":5.144444444444445,"course":271,"alt":3,"accuracy":4,"batt":88,"charge":true,"attributes":{"hdop":0.8}}"#
                + "\n")
        try client.write("id=phone-1&timestamp=1784953801&lat=-33.5&lon=151.25&speed=4&bearing=10&alarm=sos\r\n")
        try client.write(
            #"{"class":"TPV","device":"/dev/ttyUSB0","mode":3,"time":"2026-07-25T04:30:02.000Z","lat":59.6,"lon":10.3}"#
                + "\n")
        let replies = client.readLines(4)
        #expect(replies == ["skip hello", "ok 1", "ok 2", "ok 3"])
        #expect(await world.server.waitUntil { $0.count >= 3 })
        let stored = world.server.positions.sorted { $0.fixTimeMs < $1.fixTimeMs }
        #expect(stored.map(\.uniqueId) == ["gps-bow", "phone-1", "gps-bow"])
        #expect(stored[0].fixTimeMs == 1_784_953_800_000)
        #expect(stored[0].lat == 59.5 && stored[0].lon == 10.25)
        #expect(abs(stored[0].speedKnots - 10) < 0.001)
        #expect(stored[0].course == 271 && stored[0].altitude == 3 && stored[0].accuracy == 4)
        #expect(stored[0].attributes["batteryLevel"] == .number(88))
        #expect(stored[0].attributes["charge"] == .bool(true))
        #expect(stored[0].attributes["hdop"] == .number(0.8))
        #expect(abs(stored[1].speedKnots - 4) < 0.001)
        #expect(stored[1].attributes["alarm"] == .string("sos"))
        #expect(stored[2].lat == 59.6)

        let status = try world.statusJSON()
        #expect(status["running"] == .bool(true))
        let ingest = try #require(status["ingest"])
        #expect(ingest["accepted"]?.number == 3)
        let destination = try #require(status["destinations"]?.array?.first)
        #expect(destination["name"]?.string == "traccar")
        #expect(destination["state"]?.string == "online")
        #expect(try #require(status["devices"]?.array).count == 2)
    }

    @Test func malformedLinesGetTheirErrorCodesAndTheConnectionLivesOn() async throws {
        let world = try RelayWorld(ingest: "maxLineBytes: 256")
        try world.start()
        let client = try world.client()
        let long =
            #"{"device":"a","time":1784953800,"lat":1,"lon":2,"pad":""# + String(repeating: "x", count: 300) + "\"}\n"
        try client.write(#"{"device":"a","time":1784953800,"lat":1,"lon":2"# + "\n")
        try client.write(#"{"device":"a","time":1784953800,"lat":95,"lon":2}"# + "\n")
        try client.write(#"{"device":"a","lat":1,"lon":2}"# + "\n")
        try client.write(#"{"time":1784953800,"lat":1,"lon":2}"# + "\n")
        try client.write(long)
        try client.write("!AIVDM,1,1,,A,13aEOK?P00PD2wVMdLDRhgvL289?,0*26\n")
        try client.write(#"{"class":"SKY"}"# + "\n")
        try client.write(line("a", 0))
        let replies = client.readLines(8)
        #expect(replies.count == 8)
        #expect(replies[0].hasPrefix("err parse "))
        #expect(replies[1].hasPrefix("err range "))
        #expect(replies[2].hasPrefix("err time "))
        #expect(replies[3].hasPrefix("err device "))
        #expect(replies[4].hasPrefix("err too-long "))
        #expect(replies[5].hasPrefix("err unsupported "))
        #expect(replies[6] == "skip sky without satellites")
        #expect(replies[7] == "ok 1")
        world.relay?.signal(SIGTERM)
        let rejected = try #require(try world.statusJSON()["ingest"]?["rejected"])
        #expect(rejected["parse"]?.number == 1)
        #expect(rejected["too-long"]?.number == 1)
    }

    @Test func nmeaSentencesBecomeOnePositionPerFixCycle() async throws {
        func sentence(_ body: String) -> String {
            "$\(body)*\(String(format: "%02X", body.utf8.reduce(UInt8(0)) { $0 ^ $1 }))\r\n"
        }
        let world = try RelayWorld()
        try world.start()
        let client = try world.client()
        try client.write(#"{"hello":{"device":"gps-bow","ack":true}}"# + "\n")
        #expect(client.readLine() == "skip hello")
        var lines = ""
        for (i, second) in ["04", "05", "06"].enumerated() {
            let minutes = String(format: "%06.3f", 30.0 + Double(i) * 0.01)
            lines += sentence("GPRMC,1230\(second).00,A,59\(minutes),N,01042.000,E,010.0,090.0,250726,,,A")
            lines += sentence("GPGGA,1230\(second).00,59\(minutes),N,01042.000,E,1,09,0.8,12.\(i),M,20.0,M,,")
            lines += sentence("GPGSV,1,1,01,01,40,083,46")
        }
        // A bad checksum.
        lines += sentence("GPGGA,123007.00,5930.030,N,01042.000,E,1,09,0.8,12.0,M,20.0,M,,").dropLast(2) + "*00\r\n"
        try client.write(lines)
        client.finishWriting()
        let replies = client.readLines(10)
        #expect(
            replies == ["ok 1", "ok 1", "skip GSV", "ok 2", "ok 2", "skip GSV", "ok 3", "ok 3", "skip GSV"] + [
                replies.last ?? ""
            ])
        #expect(replies.last?.hasPrefix("err checksum") == true)
        #expect(await world.server.waitUntil { $0.count >= 3 })
        let stored = world.server.positions
        #expect(
            stored.map(\.fixTimeMs)
                == [4, 5, 6].map { Timestamp.milliseconds(fromISO8601: "2026-07-25T12:30:0\($0)Z")! })
        #expect(abs(stored[0].lat - (59 + 30.0 / 60)) < 1e-9)
        #expect(abs(stored[0].speedKnots - 10) < 1e-6)
        #expect(stored[1].altitude == 12.1)
        #expect(stored[0].attributes["hdop"] == .number(0.8))
    }

    @Test func resendsAreAnsweredWithTheStoredSeq() throws {
        let world = try RelayWorld()
        try world.start()
        let client = try world.client()
        try client.write(line("a", 0) + line("a", 1) + line("a", 0) + line("a", 1, lat: 45))
        #expect(client.readLines(4) == ["ok 1", "ok 2", "ok 1", "ok 2"])
        let ingest = try #require(try world.statusJSON()["ingest"])
        #expect(ingest["duplicates"]?.number == 1)
        #expect(ingest["conflicts"]?.number == 1)
    }

    @Test func withoutAcksNothingIsAnsweredButEverythingIsStoredAndCounted() async throws {
        let world = try RelayWorld()
        try world.start()
        let client = try UnixLineClient(path: world.socketPath, receiveTimeoutSeconds: 2)
        try client.write(line("quiet", 0) + "garbage\n" + line("quiet", 1))
        client.finishWriting()
        #expect(client.readLine() == nil) // closed without a word
        #expect(await world.server.waitUntil { $0.count >= 2 })
        let logs = try world.command(["logs"])
        #expect(logs.stdout.contains("rejected line (parse)"))
    }

    @Test func manyCollectorsAtOnceAndOneThatNeverReadsStallsNobody() async throws {
        let world = try RelayWorld()
        try world.start()
        // A collector that writes a lot and never reads its replies.
        let stubborn = try world.client()
        var flood = ""
        for i in 0..<30_000 { flood += line("stubborn", i) }
        let floodBytes = Array(flood.utf8)
        let writer = Thread { try? stubborn.write(floodBytes) }
        writer.start()
        // 256 others, each with its own device.
        let count = 256
        try await withThrowingTaskGroup(of: [String].self) { group in
            for c in 0..<count {
                group.addTask {
                    let client = try world.client()
                    try client.write((0..<20).map { line("c\(c)", $0) }.joined())
                    return client.readLines(20)
                }
            }
            var total = 0
            for try await replies in group {
                #expect(replies.count == 20 && replies.allSatisfy { $0.hasPrefix("ok ") })
                total += replies.count
            }
            #expect(total == count * 20)
        }
        _ = stubborn
    }

    @Test func staleSocketIsReplacedAndALiveOneRefused() throws {
        let world = try RelayWorld()
        // A socket file nobody listens on, as a crashed relay leaves it.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(world.socketPath.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        close(fd)
        #expect(FileManager.default.fileExists(atPath: world.socketPath))
        try world.start()
        let attributes = try FileManager.default.attributesOfItem(atPath: world.socketPath)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o660)
        // A second relay on the same socket must refuse to start.
        let second = try RelayProcess.command(["run", "--config", world.configPath], directory: world.directory.path)
        #expect(second.status != 0)
        #expect(second.stderr.contains("another relay is listening"))
    }

    @Test func gracefulStopAndStatusWhileDown() async throws {
        let world = try RelayWorld()
        world.server.setUnknownDevices(["ghost"])
        let relay = try world.start()
        let client = try world.client()
        try client.write(line("a", 0) + line("ghost", 0))
        #expect(client.readLines(2) == ["ok 1", "ok 2"])
        #expect(await world.server.waitUntil { $0.count >= 1 })
        // The park is recorded once the server's 400 for "ghost" is back, which may follow "a"'s 200.
        try await world.waitForStatus { $0["destinations"]?.array?.first?["parked"]?.number == 1 }
        relay.signal(SIGTERM)
        #expect(relay.exitStatus == 0)
        #expect(!FileManager.default.fileExists(atPath: world.socketPath))
        let status = try world.statusJSON()
        #expect(status["running"] == .bool(false))
        let destination = try #require(status["destinations"]?.array?.first)
        #expect(destination["pending"]?.number == 1)
        #expect(destination["parked"]?.number == 1)
        #expect(destination["parkedDevices"]?.array == [.string("ghost")])
        let human = try world.command(["status"])
        #expect(human.stdout.contains("not running"))
        #expect(human.stdout.contains("parked 1 (ghost)"))
        let logs = try world.command(["logs"])
        #expect(logs.stdout.contains("parked device ghost"))
        _ = try world.command(["logs", "--clear"])
        #expect(try world.command(["logs"]).stdout.isEmpty)
    }

    @Test func reloadAddsADestinationWithoutDisturbingTheOther() async throws {
        let world = try RelayWorld()
        let second = try FakeOsmAndServer()
        defer { second.http.stop() }
        let relay = try world.start()
        let client = try world.client()
        try client.write(line("a", 0))
        _ = client.readLine()
        #expect(await world.server.waitUntil { $0.count >= 1 })
        try world.writeConfig(moreDestinations: #"{ name: "backup", url: "\#(second.url)" },"#)
        relay.signal(SIGHUP)
        // The new destination starts with what arrives after it was added.
        var ready = false
        for _ in 0..<200 where !ready {
            ready =
                (try? world.statusJSON()["destinations"]?.array?.contains {
                    $0["name"]?.string == "backup" && $0["state"]?.string != "not started"
                }) == true
            if !ready { try await Task.sleep(for: .milliseconds(25)) }
        }
        #expect(ready)
        try client.write(line("a", 1))
        #expect(client.readLine() == "ok 2")
        #expect(await second.waitUntil { $0.count >= 1 })
        #expect(await world.server.waitUntil { $0.count >= 2 })
        #expect(second.positions.map(\.fixTimeMs) == [fixTimeMs(1)])
    }

    @Test func commandLineUsageErrors() throws {
        let world = try RelayWorld()
        #expect(try world.command(["frobnicate"]).status == 64)
        #expect(try world.command(["status", "--bogus"]).status == 64)
        let send = try world.command(["send", "--device", "x", "--lat", "north", "--lon", "1"])
        #expect(send.status == 64)
        #expect(send.stderr.contains("--lat"))
        #expect(try world.command(["status", "--help"]).stdout.contains("usage: georelay status"))
        try "{ spool: { maxBytes: 'lots' } }".write(toFile: world.configPath, atomically: true, encoding: .utf8)
        let bad = try world.command(["status"])
        #expect(bad.status == 78)
        #expect(bad.stderr.contains("spool.maxBytes: expected a number"))
    }

    @Test func sendUploadsOnePositionBypassingTheSpool() async throws {
        let world = try RelayWorld()
        let result = try world.command(["send", "--device", "boat", "--lat", "59.5", "--lon", "10.5", "--alarm", "sos"])
        #expect(result.status == 0)
        #expect(world.server.positions.count == 1)
        #expect(world.server.positions.first?.attributes["alarm"] == .string("sos"))
        world.server.setUnknownDevices(["nobody"])
        #expect(try world.command(["send", "--device", "nobody", "--lat", "1", "--lon", "1"]).status == 1)
        #expect(!FileManager.default.fileExists(atPath: world.spoolPath))
    }

    @Test func fullQuotaWithRejectAnswersSpoolFull() throws {
        let world = try RelayWorld(spool: #"maxBytes: 1048576, whenFull: "reject""#)
        world.server.http.stop() // nothing gets delivered, so nothing can be deleted
        try world.start()
        let answers = try writeInBatches(try world.client(), device: "a", count: 20_000)
        #expect(answers.count == 20_000)
        let full = answers.filter { $0.hasPrefix("err spool-full") }
        #expect(!full.isEmpty)
        #expect(answers.allSatisfy { $0.hasPrefix("ok ") || $0.hasPrefix("err spool-full") })
        // Everything answered ok is still there.
        let status = try world.statusJSON()
        #expect(status["spool"]?["rows"]?.number == Double(answers.count - full.count))
        // Counted once each (the writer and the ingest loop both counted them before).
        #expect(status["ingest"]?["rejected"]?["spool-full"]?.number == Double(full.count))
    }
}

@Suite(.offThePool) struct RelayOutageTests {
    /// The server goes away for a while and comes back on the same port: the
    /// relay catches up by itself, oldest first per device.
    @Test func serverOutageIsCaughtUpWithoutIntervention() async throws {
        let world = try RelayWorld()
        try world.start()
        let client = try world.client()
        try client.write(line("a", 0) + line("b", 0))
        #expect(client.readLines(2) == ["ok 1", "ok 2"])
        #expect(await world.server.waitUntil { $0.count >= 2 })
        // Acknowledged too before the server goes: a position stored but not yet answered when
        // the connection closes is rightly sent again, and this test counts copies.
        let acknowledged = try await world.waitForStatus { $0["destinations"]?.array?.first?["pending"]?.number == 0 }
        #expect(acknowledged["destinations"]?.array?.first?["pending"]?.number == 0, "the first two acknowledged")
        let port = world.server.http.port
        world.server.http.stop()
        try client.write((1...50).map { line("a", $0) + line("b", $0) }.joined())
        #expect(client.readLines(100).allSatisfy { $0.hasPrefix("ok ") })
        // Backing off: the status says so, and why.
        var state = ""
        for _ in 0..<200 where state != "backoff" && state != "probing" {
            state = try world.statusJSON()["destinations"]?.array?.first?["state"]?.string ?? ""
            if state != "backoff" && state != "probing" { try await Task.sleep(for: .milliseconds(25)) }
        }
        #expect(state == "backoff" || state == "probing")
        try world.server.http.start(port: port)
        let caughtUp = await world.server.waitUntil(timeout: .seconds(30)) { $0.count >= 102 }
        #expect(
            caughtUp,
            """
            the 100 outage positions at the server within 30 s of its return; \(world.server.positions.count - 2) arrived.
            status: \((try? world.command(["status"]).stdout) ?? "?")
            relay's log: \(world.relay?.stderrText().suffix(4000) ?? "")
            """)
        let traccar = world.server.traccar()
        for device in ["a", "b"] {
            // Each once, oldest first (`order: auto`: the outage's 50 fixes reach the server well
            // within 10 s), so Traccar's event handlers see every one.
            #expect(world.server.deliveryProblem(device, expected: (0...50).map(fixTimeMs)) == nil)
            #expect(
                world.server.positions.filter { $0.uniqueId == device }.map(\.fixTimeMs).prefix(2) == [
                    fixTimeMs(0), fixTimeMs(1),
                ],
                "\(device): the history first after the outage")
            #expect(traccar.devices[device]?.skippedByEvents == 0, "\(device): Traccar skipped events")
        }
    }
}

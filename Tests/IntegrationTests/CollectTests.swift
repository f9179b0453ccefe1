import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// `georelay collect` as a real process between a source and the real relay.
@Suite(.offThePool) struct CollectTests {
    func collector(_ world: RelayWorld, _ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: RelayProcess.binary)
        process.arguments = ["collect", "--socket", world.socketPath, "--log-level", "debug"] + arguments
        process.standardOutput = FileHandle.nullDevice
        // A file, not a pipe: nobody would drain a pipe.
        let log = world.directory.file("collect-\(UUID().uuidString.prefix(6)).log")
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: log)
        try TestEnvironment.launch(process)
        return process
    }

    /// The UDP port `process` has bound, once it has (it was told port 0); nil after `timeout`.
    /// The collector does not say which port the kernel gave it, so this polls the socket table.
    func boundUDPPort(of process: Process, timeout: Duration = .seconds(10)) async -> Int? {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if let port = SocketTable.udpPorts(ofProcess: process.processIdentifier).first { return port }
            if ContinuousClock.now >= deadline { break }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    /// Waits for `process` to exit, at most `timeout`; when it has not, kills it and returns false.
    func exited(_ process: Process, within timeout: Duration) async -> Bool {
        guard process.exited(within: timeout) else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return false
        }
        return true
    }

    func nmea(_ body: String) -> String {
        "$\(body)*\(String(format: "%02X", body.utf8.reduce(UInt8(0)) { $0 ^ $1 }))"
    }

    /// Three fix cycles, RMC and GGA each, starting at 12:30:`start`.
    func cycles(_ start: Int, count: Int = 3) -> [String] {
        (start..<(start + count)).flatMap { s in
            let minutes = String(format: "%06.3f", 30.0 + Double(s) * 0.001)
            let time = String(format: "1230%02d.00", s)
            return [
                nmea("GPRMC,\(time),A,59\(minutes),N,01042.000,E,005.0,090.0,250726,,,A"),
                nmea("GPGGA,\(time),59\(minutes),N,01042.000,E,1,09,0.8,12.0,M,20.0,M,,"),
            ]
        }
    }

    @Test(.enabled(if: SharedTestData.haveNMEA, "../shared/testdata/nmea is absent: the log replay is skipped"))
    func aRealReceiverLogReplayedFromAFileArrives() async throws {
        let world = try RelayWorld()
        try world.start()
        let log = SharedTestData.nmea.appendingPathComponent("telit-he910.log").path
        let process = try collector(world, ["--device", "telit", "--file", log])
        // The collector exits once the relay has answered every line, and waits for ever until then.
        try #require(await exited(process, within: .seconds(30)), "the collector had not finished the log after 30 s")
        #expect(process.terminationStatus == 0)
        // The same count the NMEA path gives for this log in the gpsd comparison.
        #expect(await world.server.waitUntil { $0.count >= 187 })
        #expect(world.server.positions.allSatisfy { $0.uniqueId == "telit" })
    }

    @Test func aTCPMultiplexerStreamSurvivesARelayRestart() async throws {
        let world = try RelayWorld()
        let relay = try world.start()
        let mux = try LineServer()
        defer { mux.stop() }
        let process = try collector(world, ["--device", "bow", "--tcp", "127.0.0.1:\(mux.port)"])
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        #expect(await mux.waitForClient())
        mux.send(cycles(0))
        #expect(await world.server.waitUntil { $0.count >= 2 })
        // The relay dies; the receiver keeps talking; the relay comes back once the collector has
        // read what was said meanwhile, so it holds those lines while the relay is gone.
        relay.signal(SIGKILL)
        mux.send(cycles(3))
        #expect(
            await mux.waitUntilClientsHaveRead(),
            "the collector did not read the lines sent while the relay was down within 10 s")
        try world.start()
        mux.send(cycles(6))
        #expect(await world.server.waitUntil(timeout: .seconds(20)) { Set($0.map(\.fixTimeMs)).count >= 8 })
        let times = Set(world.server.positions.map(\.fixTimeMs))
        // Every complete cycle sent while the collector ran arrived (the last one may still be open).
        for second in 0..<8 {
            #expect(
                times.contains(
                    Timestamp.milliseconds(fromISO8601: String(format: "2026-07-25T12:30:%02d.000Z", second))!))
        }
    }

    @Test func udpBroadcastsFromAMultiplexer() async throws {
        let world = try RelayWorld()
        try world.start()
        // Port 0: the kernel gives the collector a free port, read back from its socket once bound;
        // datagrams sent from then on wait in that socket's queue, so one round is enough.
        let process = try collector(world, ["--device", "aft", "--udp", "127.0.0.1:0"])
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        let port = try #require(await boundUDPPort(of: process), "the collector bound no UDP port within 10 s")
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        for line in cycles(0, count: 3) {
            let bytes = Array((line + "\r\n").utf8)
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        #expect(
            await world.server.waitUntil { $0.count >= 2 }, "positions from the datagrams did not arrive within 30 s")
        #expect(world.server.positions.allSatisfy { $0.uniqueId == "aft" })
    }

    @Test func gpsdReportsWithDevicesMappedByPath() async throws {
        let world = try RelayWorld()
        try world.start()
        let gpsd = try LineServer()
        defer { gpsd.stop() }
        let process = try collector(
            world, ["--device", "/dev/ttyUSB0=bow,/dev/ttyUSB1=stern", "--gpsd", "127.0.0.1:\(gpsd.port)"])
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        #expect(await gpsd.waitForClient())
        // Like gpsd, report only once the client has asked to watch.
        #expect(await gpsd.waitForRequest { $0.hasPrefix("?WATCH=") } != nil, "no ?WATCH within 10 s of connecting")
        #expect(gpsd.requests.first?.hasPrefix("?WATCH=") == true, "\(gpsd.requests)")
        gpsd.send([
            #"{"class":"VERSION","release":"3.25"}"#,
            #"{"class":"TPV","device":"/dev/ttyUSB0","mode":3,"time":"2026-07-25T12:30:00.000Z","lat":59.5,"lon":10.7}"#,
            // Forwarded too, for the integrity watch; it stores nothing.
            #"{"class":"SKY","device":"/dev/ttyUSB1","hdop":0.9,"satellites":[{"PRN":5,"ss":41.0,"used":true}]}"#,
            #"{"class":"TPV","device":"/dev/ttyUSB1","mode":3,"time":"2026-07-25T12:30:00.000Z","lat":59.6,"lon":10.8}"#,
            #"{"class":"TPV","device":"/dev/ttyUSB1","mode":1,"time":"2026-07-25T12:30:01.000Z"}"#,
        ])
        #expect(await world.server.waitUntil { $0.count >= 2 })
        #expect(Set(world.server.positions.map(\.uniqueId)) == ["bow", "stern"])
    }

    @Test func anUnopenableSourceExitsNonZeroWithAReason() throws {
        let world = try RelayWorld()
        let result = try RelayProcess.command(
            ["collect", "--device", "x", "--serial", "/dev/does-not-exist", "--socket", world.socketPath],
            directory: world.directory.path)
        #expect(result.status == 1)
        #expect(result.stderr.contains("cannot open /dev/does-not-exist"))
    }
}

@Suite(.offThePool) struct MultiSourceTests {
    @Test func theBestReceiverFeedsTheDeviceAndTheBackupTakesOverWhenItFallsSilent() async throws {
        let world = try RelayWorld()
        try world.writeConfig(
            topLevel: #"devices: [{ id: "boat", sources: ["gps-bow", "gps-stern"], failoverSeconds: 1 }],"#)
        try world.start()
        let client = try world.client()
        // Both receivers report; only the primary's positions become the boat's.
        try client.write(
            line("gps-bow", 0, lat: 59.0) + line("gps-stern", 0, lat: 59.1) + line("gps-bow", 1, lat: 59.0)
                + line("gps-stern", 1, lat: 59.1))
        #expect(client.readLines(4).allSatisfy { $0.hasPrefix("ok ") })
        #expect(await world.server.waitUntil { $0.count >= 2 })
        // The primary falls silent for longer than failoverSeconds. A real wait, not a guess at when
        // something happens: the relay judges silence by the time since the primary's last arrival
        // on its monotonic clock, only when the next position comes, so there is nothing to await;
        // a sleep can only overshoot, and 1.3 s after the positions arrived is past the 1 s window.
        try await Task.sleep(for: .milliseconds(1300))
        try client.write(line("gps-stern", 2, lat: 59.1))
        _ = client.readLine()
        #expect(await world.server.waitUntil { $0.count >= 3 })
        let stored = world.server.positions.sorted { $0.fixTimeMs < $1.fixTimeMs }
        #expect(stored.map(\.uniqueId) == ["boat", "boat", "boat"])
        #expect(stored.map(\.lat) == [59.0, 59.0, 59.1])
        #expect(
            stored.map { $0.attributes["source"] } == [.string("gps-bow"), .string("gps-bow"), .string("gps-stern")])
        let status = try world.statusJSON()
        let boat = try #require(status["devices"]?.array?.first { $0["name"]?.string == "boat" })
        let sources = try #require(boat["sources"]?.array)
        #expect(sources.map { $0["name"]?.string } == ["gps-bow", "gps-stern"])
        #expect(sources.map { $0["active"] } == [.bool(false), .bool(true)])
        #expect(status["devices"]?.array?.contains { $0["name"]?.string == "gps-bow" } == false)
        #expect(try world.command(["logs"]).stdout.contains("boat: failover from gps-bow to gps-stern"))
    }
}

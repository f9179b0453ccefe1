import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// The real binary with `protocol: "teltonika"`: the configuration reaches the Teltonika
/// transport, over plain TCP and over TLS (the self-signed proxy of `TLSTests` in front of the
/// fake port), where the certificate is verified as for HTTPS destinations.
@Suite(.offThePool) struct TeltonikaEndToEndTests {
    /// Writes `count` positions of `device` on a fresh collector connection and checks each is taken.
    func send(_ world: RelayWorld, _ device: String, count: Int) throws {
        let client = try world.client()
        for second in 0..<count {
            try client.write(line(device, second, lat: 59 + Double(second) * 1e-4))
            #expect(client.readLine() == "ok \(second + 1)")
        }
    }

    @Test func positionsReachTheTeltonikaPortOverTCP() async throws {
        let port = try FakeTeltonikaServer()
        defer { port.stop() }
        let world = try RelayWorld()
        try world.writeConfig(destination: #"protocol: "teltonika","#, traccarURL: "tcp://127.0.0.1:\(port.port)")
        try world.start()
        try send(world, "356307042441013", count: 20)
        #expect(await port.waitUntil { $0.count >= 20 }, "every position stored")
        #expect(port.positions.map(\.fixTimeMs) == (0..<20).map(fixTimeMs))
        #expect(port.statistics.connections == 1)
        // Every record reaches Traccar's event handlers, with its odometer (IO 16).
        #expect(port.traccar().skippedByEvents == 0)
        #expect(port.positions.allSatisfy { $0.attributes["odometer"] != nil })
        let status = try await world.waitForStatus { $0["destinations"]?.array?.first?["pending"]?.number == 0 }
        #expect(status["destinations"]?.array?.first?["state"]?.string == "online")
    }

    /// `georelay send` bypasses the spool: one frame of one position on a connection of its own.
    @Test func sendUploadsOnePositionToTheTeltonikaPort() async throws {
        let port = try FakeTeltonikaServer()
        defer { port.stop() }
        port.setUnknownDevices(["ghost"])
        let world = try RelayWorld()
        try world.writeConfig(destination: #"protocol: "teltonika","#, traccarURL: "tcp://127.0.0.1:\(port.port)")
        let sent = try world.command([
            "send", "--device", "356307042441013", "--lat", "59.5", "--lon", "10.5", "--alarm", "sos",
        ])
        #expect(sent.status == 0, "\(sent.stdout) \(sent.stderr)")
        let stored = try #require(port.positions.first)
        #expect(stored.uniqueId == "356307042441013" && stored.lat == 59.5 && stored.lon == 10.5)
        #expect(stored.attributes["alarm"] == .string("general"))
        let unknown = try world.command(["send", "--device", "ghost", "--lat", "1", "--lon", "2"])
        #expect(unknown.status != 0, "an unknown device is not a success")
        #expect(port.positions.count == 1)
    }

    @Test func overTLSTheCertificateIsVerifiedAgainstCAFile() async throws {
        let port = try FakeTeltonikaServer()
        defer { port.stop() }
        let tls = try SelfSignedServer(targetPort: port.port)
        defer { tls.stop() }
        let world = try RelayWorld()
        try world.writeConfig(
            destination: #"protocol: "teltonika", caFile: "\#(tls.certificate)","#,
            traccarURL: "tls://127.0.0.1:\(tls.port)")
        try world.start()
        try send(world, "a", count: 5)
        #expect(await port.waitUntil { $0.count >= 5 }, "every position stored through TLS")
        #expect(port.positions.map(\.uniqueId) == Array(repeating: "a", count: 5))
    }

    @Test func overTLSAServerNobodyVouchesForGetsNothing() async throws {
        let port = try FakeTeltonikaServer()
        defer { port.stop() }
        let tls = try SelfSignedServer(targetPort: port.port)
        defer { tls.stop() }
        let world = try RelayWorld()
        try world.writeConfig(destination: #"protocol: "teltonika","#, traccarURL: "tls://127.0.0.1:\(tls.port)")
        try world.start()
        try send(world, "356307042441013", count: 1)
        let status = try await world.waitForStatus {
            $0["destinations"]?.array?.first?["lastError"]?.string?.contains("certificate") == true
        }
        let destination = status["destinations"]?.array?.first
        #expect(
            destination?["lastError"]?.string?.contains("certificate") == true,
            "\(destination?["lastError"]?.string ?? "")")
        #expect(destination?["pending"]?.number == 1)
        #expect(port.statistics.connections == 0 && port.positions.isEmpty)
    }
}

import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// A free TCP port on loopback for the relay to listen on, from below the kernel's ephemeral
/// range (`ip_local_port_range`, 32768 and up here): a port bound and released from that range
/// could be handed to any outgoing connection (a connection attempt every half second while a
/// link is down, in tests running beside this one) before the relay binds it, and the relay's
/// start then fails with "address already in use". Ports below it are only ever taken by name.
func freePort() -> Int {
    for _ in 0..<1000 {
        let port = Int.random(in: 20_000..<32_768)
        if loopbackPortIsFree(port) { return port }
    }
    fatalError("no free port on loopback between 20000 and 32767")
}

@Suite(.offThePool) struct PhoneListenerTests {
    func post(_ url: String, body: String, type: String, agent: String = "TraccarClient/9") throws -> Int {
        let easy = try CurlEasy()
        let response = try easy.perform(
            HTTPRequest(
                method: body.isEmpty ? "GET" : "POST", url: url,
                headers: [("Content-Type", type), ("User-Agent", agent)], body: Array(body.utf8)))
        return response.status
    }

    @Test func phonesPostingLikeToTraccarAreStoredAndForwarded() async throws {
        // The port is picked while the fake server holds its own: freePort() cannot hand out the
        // fake's port before it is bound (the relay then refused its config as pointing at itself).
        let world = try RelayWorld()
        let port = freePort()
        try world.writeConfig(
            ingest: #"http: { listen: "127.0.0.1:\#(port)", devices: ["phone-1", "phone-2", "phone-3", "p"] }"#)
        try world.start()
        // The relay is up when its socket accepts; the phone port is bound just after.
        try awaitListening(port: port)
        let base = "http://127.0.0.1:\(port)"
        // The query form (GET), the form body (POST), and the JSON body of current Traccar Client apps.
        #expect(
            try post(
                base + "/?id=phone-1&timestamp=1784953800&lat=59.5&lon=10.5&speed=10&batt=70", body: "",
                type: "text/plain") == 200)
        #expect(
            try post(
                base + "/", body: "id=phone-2&timestamp=1784953801&lat=59.6&lon=10.6&alarm=sos",
                type: "application/x-www-form-urlencoded") == 200)
        let json =
            #"{"device_id":"phone-3","location":{"timestamp":"2026-07-25T04:30:02.000Z","coords":{"latitude":59.7,"longitude":10.7,"accuracy":5,"speed":2.5,"heading":-1,"altitude":12},"is_moving":false,"battery":{"level":0.85,"is_charging":true},"extras":{"trip":"A"}}}"#
        #expect(try post(base + "/", body: json, type: "application/json") == 200)
        // Unusable requests are refused; a request from a georelay is a loop.
        #expect(try post(base + "/?id=phone-1&timestamp=1784953803", body: "", type: "text/plain") == 400)
        #expect(try post(base + "/", body: #"{"device_id":"x"}"#, type: "application/json") == 400)
        #expect(
            try post(base + "/?id=p&timestamp=1784953804&lat=1&lon=1", body: "", type: "text/plain", agent: "georelay")
                == 508)

        #expect(await world.server.waitUntil { $0.count >= 3 })
        let byId = Dictionary(uniqueKeysWithValues: world.server.positions.map { ($0.uniqueId, $0) })
        #expect(abs((byId["phone-1"]?.speedKnots ?? 0) - 10) < 1e-6)
        #expect(byId["phone-1"]?.attributes["batteryLevel"] == .number(70))
        #expect(byId["phone-2"]?.attributes["alarm"] == .string("sos"))
        let phone3 = try #require(byId["phone-3"])
        #expect(phone3.lat == 59.7 && phone3.accuracy == 5 && phone3.altitude == 12 && phone3.course == 0)
        #expect(phone3.attributes["batteryLevel"] == .number(85))
        #expect(phone3.attributes["charge"] == .bool(true))
        #expect(phone3.attributes["motion"] == .bool(false))
        #expect(phone3.attributes["trip"] == .string("A"))
    }

    /// A phone listed as one of a device's sources feeds the device as a collector would: its
    /// positions go to the destinations under the device, with the phone as their source.
    @Test func aPhoneListedAsADevicesSourceIsRoutedToTheDevice() async throws {
        // The port is picked while the fake server holds its own: freePort() cannot hand out the
        // fake's port before it is bound (the relay then refused its config as pointing at itself).
        let world = try RelayWorld()
        let port = freePort()
        try world.writeConfig(ingest: #"http: { listen: "127.0.0.1:\#(port)" }"#)
        try world.writeConfig(
            ingest: #"http: { listen: "127.0.0.1:\#(port)" }"#,
            topLevel: #"devices: [{ id: "boat", sources: ["gps-bow", "phone-a"], failoverSeconds: 10 }],"#)
        try world.start()
        // The relay is up when its socket accepts; the phone port is bound just after.
        try awaitListening(port: port)
        let base = "http://127.0.0.1:\(port)"
        for second in 0..<3 {
            #expect(
                try post(
                    base + "/?id=phone-a&timestamp=\(1_784_953_800 + second)&lat=59.5&lon=10.5", body: "",
                    type: "text/plain") == 200)
        }
        #expect(
            await world.server.waitUntil { $0.count >= 3 },
            "the phone's positions never reached the server under its device")
        let stored = world.server.positions
        #expect(stored.allSatisfy { $0.uniqueId == "boat" }, "\(stored.map(\.uniqueId))")
        #expect(stored.allSatisfy { $0.attributes["source"] == .string("phone-a") })
    }

    /// On a LAN others share, the phone port takes only the ids the configuration lets
    /// it, never one a collector feeds through the socket, and a client past its rate is told to
    /// come back later; a refused request says nothing of why (Traccar's 400 for an unknown device).
    @Test func thePhonePortTakesOnlyItsOwnDevicesAtABoundedRate() async throws {
        let world = try RelayWorld()
        let port = freePort()
        try world.writeConfig(
            ingest: #"http: { listen: "127.0.0.1:\#(port)", devices: ["phone-1", "gps-bow"], maxRequestsPerSecond: 1 }"#
        )
        try world.start()
        try awaitListening(port: port)
        let base = "http://127.0.0.1:\(port)"
        // A collector feeds gps-bow through the socket: from then on the phone port does not take it.
        let collector = try world.client()
        try collector.write(#"{"hello":{"device":"gps-bow","ack":true}}"# + "\n" + line("gps-bow", 0))
        #expect(collector.readLine() == "skip hello")
        #expect(collector.readLine() == "ok 1")
        #expect(try post(base + "/?id=gps-bow&timestamp=1784953801&lat=1&lon=1", body: "", type: "text/plain") == 400)
        #expect(try post(base + "/?id=stranger&timestamp=1784953801&lat=1&lon=1", body: "", type: "text/plain") == 400)
        #expect(try post(base + "/?id=phone-1&timestamp=1784953801&lat=1&lon=1", body: "", type: "text/plain") == 200)
        // A burst of ten at one a second: the rest of a fast burst is answered 429.
        var statuses: [Int] = []
        for second in 2..<20 {
            statuses.append(
                try post(
                    base + "/?id=phone-1&timestamp=\(1_784_953_800 + second)&lat=1&lon=1", body: "", type: "text/plain")
            )
        }
        #expect(statuses.contains(429), "\(statuses)")
        #expect(statuses.filter { $0 == 200 }.count <= 11, "\(statuses)")
        #expect(await world.server.waitUntil { $0.count >= 2 })
        #expect(!world.server.positions.contains { $0.uniqueId == "stranger" })
        #expect(world.server.positions.filter { $0.uniqueId == "gps-bow" }.count == 1, "only the collector's")
    }

    @Test func aDestinationPointingAtTheListenerIsRefusedAtStart() throws {
        // The port is picked while the fake server holds its own: freePort() cannot hand out the
        // fake's port before it is bound (the relay then refused its config as pointing at itself).
        let world = try RelayWorld()
        let port = freePort()
        try world.writeConfig(ingest: #"http: { listen: "0.0.0.0:\#(port)" }"#)
        try world.writeConfig(
            ingest: #"http: { listen: "0.0.0.0:\#(port)" }"#,
            moreDestinations: #"{ name: "self", url: "http://127.0.0.1:\#(port)" },"#)
        let result = try world.command(["run"])
        #expect(result.status == 78)
        #expect(result.stderr.contains("destinations[1].url: points at this relay's own phone listener"))
    }
}

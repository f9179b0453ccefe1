import Foundation
import GeoRelayHTTP
import GeoRelayTestTraits
import Testing

@testable import GeoRelayService

/// The status page answers only names that are this box (DNS rebinding): the address the request
/// reached, localhost, the host name, and `ui.hosts`.
@Suite(.offThePool) struct HostCheckTests {
    func request(host: String?) -> HTTPListener.Request {
        HTTPListener.Request(
            method: "GET", target: "/status.json", headers: host.map { [("Host", $0)] } ?? [], body: [],
            clientAddress: "192.168.4.20", localAddress: "192.168.4.1")
    }

    @Test(
        arguments: [
            ("192.168.4.1:8080", true), ("192.168.4.1", true), ("localhost:8080", true), ("127.0.0.1:8080", true),
            ("relay.boat:8080", true), ("RELAY.BOAT", true), (nil, true),
            ("evil.example:8080", false), ("192.168.4.2:8080", false), ("relay.boat.evil.example", false),
            ("10.0.0.1", false),
        ] as [(String?, Bool)])
    func answersOnlyNamesOfThisBox(host: String?, allowed: Bool) {
        #expect(HostCheck.allows(request(host: host), names: ["relay.boat"]) == allowed)
    }

    @Test func theHostNameAndItsMDNSNameAreThisBox() {
        let own = HostCheck.ownName
        try? #require(!own.isEmpty)
        #expect(HostCheck.allows(request(host: own + ":8080"), names: []))
        #expect(HostCheck.allows(request(host: own + ".local"), names: []))
    }
}

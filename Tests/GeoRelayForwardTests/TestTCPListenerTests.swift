import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// The fake servers' listener, stopped and started again on its port as a destination that goes
/// away and comes back: nothing else may take the port meanwhile.
@Suite(.offThePool) struct TestTCPListenerTests {
    @Test func aStoppedListenerRefusesConnectionsAndKeepsItsPortForItsReturn() throws {
        let listener = try TestTCPListener(name: "reserved") { _, _ in }
        let port = listener.port
        listener.stop()

        #expect(IPv4Socket.connect(host: "127.0.0.1", port: port) == nil, "a stopped listener took a connection")
        #expect(errno == ECONNREFUSED, "a stopped listener's port: \(String(cString: strerror(errno)))")
        // What an outgoing connection's ephemeral end or another test's bind(0) would do: refused the port.
        #expect(!loopbackPortIsFree(port), "another socket could bind the stopped listener's port \(port)")

        try listener.start(port: port)
        let client = try #require(IPv4Socket.connect(host: "127.0.0.1", port: port), "the listener is back")
        try client.close()
        listener.stop()
    }
}

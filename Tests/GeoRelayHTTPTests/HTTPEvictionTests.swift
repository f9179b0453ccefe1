import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

@testable import GeoRelayHTTP

/// Whom the loop closes to make room, driven by hand: the loop is built but not run, so the
/// connections wait in the kernel's accept queue until the test calls `acceptAll`, as a flood
/// of connections arriving together leaves them.
@Suite(.offThePool) struct HTTPEvictionTests {
    /// A phone whose request is in the kernel when a flood of idle connections arrives in the
    /// same burst looks idle (nothing read yet) and was the oldest, so it was the one closed.
    @Test func aRequestWaitingUnreadIsNotTakenForAnIdleConnection() throws {
        var limits = HTTPListener.Limits()
        limits.maxConnections = 2
        let socket = try IPv4Socket.bind(
            type: Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), host: "127.0.0.1", port: 0,
            backlog: 16)
        let loop = try HTTPServerLoop(
            listener: socket.descriptor, what: "test.listen", limits: limits, logger: nil, clock: SystemClock(),
            handler: { _ in HTTPServerResponse(status: 200, reason: "OK") })
        defer { for connection in Array(loop.connections.values) { loop.closeConnection(connection) } }

        let phone = try TCPTestClient(port: socket.port)
        try phone.write(Array("GET /phone HTTP/1.1\r\nHost: relay\r\n\r\n".utf8))
        let flood = try (0..<2).map { _ in try TCPTestClient(port: socket.port) }
        loop.acceptAll()

        #expect(loop.statistics.withLock(\.accepted) == 3, "the phone and two idle connections accepted")
        #expect(loop.statistics.withLock(\.evicted) == 1)
        let open = Set(loop.connections.keys)
        #expect(open.contains(1), "the phone's connection, its request unread, was closed; open: \(open.sorted())")
        #expect(open == [1, 3], "the first idle connection is the one closed; open: \(open.sorted())")
        _ = flood
    }
}

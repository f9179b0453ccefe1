import CCurl
import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

/// The test kit's link is one link: connections through a capped `FaultProxy` share its
/// bandwidth, as everything on a satellite terminal does. (With a clock per connection, four
/// pipelined connections or one Teltonika connection per device got four or forty times it.)
@Suite(.offThePool) struct SharedLinkTests {
    @Test func connectionsShareTheBandwidth() throws {
        let (listener, serverPort) = try IPv4Socket.bind(
            type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 4)
        defer { try? listener.close() }
        let rate = 40_000
        let each = 20_000
        let connections = 2
        let proxy = try FaultProxy(targetPort: serverPort, bytesPerSecond: rate)
        defer { proxy.stop() }
        // The far end reads each connection to its end.
        let received = Mutex(0)
        let done = DispatchSemaphore(value: 0)
        Thread {
            for _ in 0..<connections {
                let fd = accept(listener.number, nil, nil)
                guard fd >= 0 else { return }
                Thread {
                    defer {
                        close(fd)
                        done.signal()
                    }
                    var buffer = [UInt8](repeating: 0, count: 65_536)
                    while true {
                        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                        guard n > 0 else { return }
                        received.withLock { $0 += n }
                    }
                }.start()
            }
        }.start()
        let start = ContinuousClock.now
        var clients: [FileDescriptor] = []
        for _ in 0..<connections {
            clients.append(try #require(IPv4Socket.connect(host: "127.0.0.1", port: proxy.port)))
        }
        let bytes = [UInt8](repeating: 1, count: each)
        for client in clients {
            try bytes.withUnsafeBytes { try client.writeAll($0) }
            shutdown(client.number, Int32(SHUT_WR))
        }
        for _ in 0..<connections {
            #expect(
                done.wait(timeout: .now() + 30) == .success, "the far end read every connection to its end within 30 s")
        }
        let took = ContinuousClock.now - start
        for client in clients { try? client.close() }
        #expect(received.withLock { $0 } == each * connections)
        // A lower bound only: a slow machine makes it longer, never shorter.
        let link = Duration.seconds(Double(each * connections) / Double(rate))
        #expect(
            took >= link * 0.9,
            "\(each * connections) bytes at \(rate) B/s crossed in \(took): the connections did not share the link")
    }
}

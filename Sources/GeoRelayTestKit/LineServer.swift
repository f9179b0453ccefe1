import CLinux
import Foundation
import Glibc
import GeoRelayCore
import Synchronization

/// A TCP server on loopback that hands lines to whoever connects: a stand-in
/// for a marine multiplexer or a gpsd in collector tests.
package final class LineServer: Sendable {
    private let listenFD: Int32
    package let port: Int
    private let clients = Mutex<[Int32]>([])
    private let connected = WakeSignal()
    /// Lines received from clients (gpsd's `?WATCH`), in order.
    private let received = Mutex<[String]>([])

    package init() throws {
        let (fd, port) = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 16)
        self.port = port
        listenFD = fd
        Thread { [self] in
            while true {
                let client = accept4(fd, nil, nil, Int32(SOCK_CLOEXEC.rawValue))
                if client < 0 { return }
                clients.withLock { $0.append(client) }
                connected.signal()
                Thread { [self] in
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    while true {
                        let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
                        if n <= 0 { return }
                        let text = String(decoding: buffer[0..<n], as: UTF8.self)
                        received.withLock { $0 += text.split(whereSeparator: \.isNewline).map(String.init) }
                    }
                }.start()
            }
        }.start()
    }

    /// Waits until someone is connected (bounded).
    package func waitForClient(timeout: Duration = .seconds(10)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while clients.withLock({ $0.isEmpty }) {
            if ContinuousClock.now >= deadline { return false }
            await connected.wait(timeout: .milliseconds(200))
        }
        return true
    }

    package var requests: [String] { received.withLock { $0 } }

    /// Sends lines to every connected client.
    package func send(_ lines: [String]) {
        let bytes = Array(lines.map { $0 + "\r\n" }.joined().utf8)
        for fd in clients.withLock({ $0 }) {
            _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
    }

    package func stop() {
        shutdown(listenFD, Int32(SHUT_RDWR))
        close(listenFD)
        for fd in clients.withLock({ $0 }) { shutdown(fd, Int32(SHUT_RDWR)); close(fd) }
    }

    deinit { stop() }
}

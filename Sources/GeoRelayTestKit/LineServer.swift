import CLinux
import Foundation
import GeoRelayCore
import Glibc
import Synchronization

/// A TCP server on loopback that hands lines to whoever connects: a stand-in
/// for a marine multiplexer or a gpsd in collector tests.
package final class LineServer: Sendable {
    private struct Client: Sendable {
        var fd: Int32
        /// The client's end of the connection, to find it in the kernel's socket table.
        var port: Int
    }

    private let listenFD: Int32
    package let port: Int
    private let clients = Mutex<[Client]>([])
    private let connected = WakeSignal()
    /// Lines received from clients (gpsd's `?WATCH`), in order.
    private let received = Mutex<[String]>([])
    private let receivedSignal = WakeSignal()
    private let stopped = Atomic<Bool>(false)

    package init() throws {
        let bound = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 16)
        let (fd, port) = (bound.descriptor.release(), bound.port)
        self.port = port
        listenFD = fd
        Thread { [self] in
            while true {
                var peer = sockaddr_in()
                var length = socklen_t(MemoryLayout<sockaddr_in>.size)
                let client = withUnsafeMutablePointer(to: &peer) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        accept4(fd, $0, &length, Int32(SOCK_CLOEXEC.rawValue))
                    }
                }
                if client < 0 { return }
                clients.withLock { $0.append(Client(fd: client, port: Int(UInt16(bigEndian: peer.sin_port)))) }
                connected.signal()
                Thread { [self] in
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    while true {
                        let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
                        if n <= 0 { return }
                        let text = String(decoding: buffer[0..<n], as: UTF8.self)
                        received.withLock { $0 += text.split(whereSeparator: \.isNewline).map(String.init) }
                        receivedSignal.signal()
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

    /// Waits until a client has sent a line that `matches` (gpsd's `?WATCH`) and returns it,
    /// or nil when `timeout` passes first.
    package func waitForRequest(timeout: Duration = .seconds(10), where matches: (String) -> Bool) async -> String? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let request = requests.first(where: matches) { return request }
            let remaining = deadline - ContinuousClock.now
            if remaining <= .zero { return nil }
            await receivedSignal.wait(timeout: min(remaining, .milliseconds(500)))
        }
    }

    /// Sends lines to every connected client.
    package func send(_ lines: [String]) {
        let bytes = Array(lines.map { $0 + "\r\n" }.joined().utf8)
        for fd in clients.withLock({ $0.map(\.fd) }) {
            _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
    }

    /// Waits until every connected client has read everything sent to it: nothing left
    /// unacknowledged on this end of each connection, nothing left unread on the client's.
    /// Returns false when `timeout` passes first (or a client's end is gone).
    ///
    /// The kernel does not announce a reader catching up, so this polls its socket table;
    /// a collector that has read the lines holds them in its own memory, whatever its relay does.
    package func waitUntilClientsHaveRead(timeout: Duration = .seconds(10)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            let table = SocketTable.tcpRows()
            func row(_ local: Int, _ remote: Int) -> SocketTable.Row? {
                table.first { $0.localPort == local && $0.remotePort == remote }
            }
            let caughtUp = clients.withLock { $0.map(\.port) }.allSatisfy { client in
                row(port, client)?.transmitQueue == 0 && row(client, port)?.receiveQueue == 0
            }
            if caughtUp { return true }
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Closes the listener and every connection; once only, so a `defer` and `deinit` both
    /// calling it cannot close descriptor numbers another test has been given since.
    package func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        shutdown(listenFD, Int32(SHUT_RDWR))
        close(listenFD)
        for fd in clients.withLock({ $0.map(\.fd) }) {
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
        }
    }

    deinit { stop() }
}

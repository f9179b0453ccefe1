import CLinux
import Foundation
import Glibc
import GeoRelayCore
import Synchronization

/// A TCP proxy on loopback that caps the bandwidth each way, standing in for a
/// metered uplink (a satellite terminal's few hundred kbit/s) in benchmarks and tests.
package final class ThrottledProxy: Sendable {
    private let listenFD: Int32
    private let targetPort: Int
    private let bytesPerSecond: Int
    private let portValue: Int
    private let stopped = Atomic<Bool>(false)

    package var port: Int { portValue }

    /// - Parameter bytesPerSecond: the cap in each direction.
    package init(targetPort: Int, bytesPerSecond: Int) throws {
        self.targetPort = targetPort
        self.bytesPerSecond = bytesPerSecond
        (listenFD, portValue) = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 64)
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    package func stop() {
        if !stopped.exchange(true, ordering: .relaxed) {
            shutdown(listenFD, Int32(SHUT_RDWR))
            close(listenFD)
        }
    }

    deinit { stop() }

    private func acceptLoop() {
        while !stopped.load(ordering: .relaxed) {
            let client = accept(listenFD, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            guard let upstream = IPv4Socket.connect(host: "127.0.0.1", port: targetPort) else {
                close(client)
                continue
            }
            let rate = bytesPerSecond
            Thread { Self.pump(from: client, to: upstream, bytesPerSecond: rate) }.start()
            Thread { Self.pump(from: upstream, to: client, bytesPerSecond: rate) }.start()
        }
    }

    /// Copies one direction, sleeping so that it never runs ahead of the cap.
    private static func pump(from source: Int32, to destination: Int32, bytesPerSecond: Int) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let started = WallClock.monotonicNs()
        var total = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(source, $0.baseAddress, min($0.count, max(512, bytesPerSecond / 20)), 0) }
            if n <= 0 { break }
            total += n
            // Pacing: the n bytes may go out only when the cap allows them.
            let due = started + UInt64(Double(total) / Double(bytesPerSecond) * 1e9)
            let now = WallClock.monotonicNs()
            if due > now { usleep(UInt32((due - now) / 1000)) }
            var offset = 0
            while offset < n {
                let sent = buffer.withUnsafeBytes { send(destination, $0.baseAddress! + offset, n - offset, Int32(MSG_NOSIGNAL)) }
                if sent <= 0 { break }
                offset += sent
            }
        }
        shutdown(destination, Int32(SHUT_WR))
        shutdown(source, Int32(SHUT_RD))
    }
}

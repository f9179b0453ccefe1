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
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard fd >= 0, bound == 0, listen(fd, 64) == 0 else { throw SystemError(call: "bind", errno: errno, context: "proxy") }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        portValue = Int(UInt16(bigEndian: actual.sin_port))
        listenFD = fd
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
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(targetPort).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard connected == 0 else {
                close(client)
                close(upstream)
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

import Foundation
import Glibc

/// systemd's notify socket, faked: a Unix datagram socket a test binds and hands to the relay
/// as `NOTIFY_SOCKET`; each sd_notify datagram (`READY=1`, `WATCHDOG=1`, `STATUS=…`) is
/// read with the moment it arrived, so a test can tell when keep-alives stopped.
package final class FakeNotifySocket: @unchecked Sendable {
    package let path: String
    private let fd: Int32

    /// One datagram and when the test read it.
    package struct Datagram: Sendable {
        package var message: String
        package var at: ContinuousClock.Instant
    }

    package init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            throw RelayProcessError(message: "socket(AF_UNIX, SOCK_DGRAM): \(String(cString: strerror(errno)))")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw RelayProcessError(message: "notify socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw RelayProcessError(message: "cannot bind the notify socket \(path): \(reason)")
        }
    }

    /// The next datagram, or nil when none arrives within `timeout`.
    package func next(timeout: Duration) -> Datagram? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else { return nil }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let (seconds, attoseconds) = remaining.components
            let ms = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
            let ready = poll(&poller, 1, ms)
            if ready < 0, errno == EINTR { continue }
            guard ready > 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 { return Datagram(message: String(decoding: buffer[0..<n], as: UTF8.self), at: .now) }
        }
    }

    deinit {
        close(fd)
        unlink(path)
    }
}

import CLinux
import FoundationEssentials
import GeoRelayCore
import Glibc

/// Tells systemd how the service is doing (`Type=notify`): the sd_notify
/// datagram written straight to `$NOTIFY_SOCKET`, no libsystemd needed.
package struct SystemdNotifier: Sendable {
    private let path: String?
    /// `WatchdogSec`, when systemd asked this process for keep-alives: without one
    /// that long, systemd restarts the service.
    package let watchdogTimeout: Duration?

    package init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        path = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        // As sd_watchdog_enabled: WATCHDOG_PID, when set, must name this process (a child that
        // inherited the environment is not the one systemd watches).
        let forUs = environment["WATCHDOG_PID"].map { Int32($0) == getpid() } ?? true
        watchdogTimeout =
            forUs ? environment["WATCHDOG_USEC"].flatMap(Int64.init).flatMap { $0 > 0 ? .microseconds($0) : nil } : nil
    }

    package var isActive: Bool { path != nil }

    /// Sends `READY=1`, `STOPPING=1`, `WATCHDOG=1`, `STATUS=...`; silently nothing without systemd.
    ///
    /// Never waits: a notify socket whose queue is full (a manager that stopped reading; the
    /// kernel queues only `net.unix.max_dgram_qlen`, 10 by default) drops the datagram instead.
    /// A blocking send there held the relay's stop for ever after `STOPPING=1`, with the spool
    /// still open; a lost keep-alive costs at most a restart by the watchdog, which is what a
    /// manager that stopped reading would do anyway.
    package func notify(_ state: String) {
        guard let path else { return }
        guard let socket = try? FileDescriptor.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue)) else { return }
        defer { try? socket.close() }
        let fd = socket.number
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        // '@' names a socket in the abstract namespace: a leading zero byte.
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        let message = Array(state.utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(fd, message, message.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT), $0, length)
            }
        }
    }
}

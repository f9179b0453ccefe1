import CLinux
import GeoRelayCore
import Glibc

/// Owns an epoll instance (level-triggered) and an eventfd to wake it from other threads.
///
/// Not `Sendable` except for `wake()`, which any thread may call. Both event loops use it
/// (the HTTP listener's and the socket ingest's, which depends on this target for the
/// phone listener anyway), so it lives here once.
package final class Epoll {
    private let instance: FileDescriptor
    /// The eventfd that `wake(_:)` writes; other threads hold it to wake the loop.
    package let wakeup: FileDescriptor
    package var fd: Int32 { instance.number }
    /// The token reported for the wake eventfd.
    package static let wakeToken: UInt64 = .max

    package init() throws(SystemError) {
        instance = FileDescriptor(adopting: try syscall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) })
        wakeup = FileDescriptor(adopting: try syscall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) })
        try add(wakeup.number, token: Self.wakeToken, events: EPOLLIN.rawValue)
    }

    package func add(_ target: Int32, token: UInt64, events: UInt32) throws(SystemError) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        try syscall("epoll_ctl(ADD)") { epoll_ctl(fd, EPOLL_CTL_ADD, target, &event) }
    }

    package func modify(_ target: Int32, token: UInt64, events: UInt32) throws(SystemError) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        try syscall("epoll_ctl(MOD)") { epoll_ctl(fd, EPOLL_CTL_MOD, target, &event) }
    }

    package func remove(_ target: Int32) {
        var event = epoll_event()
        _ = epoll_ctl(fd, EPOLL_CTL_DEL, target, &event)
    }

    /// Waits for events; `timeoutMs` -1 waits for ever (no polling when idle).
    package func wait(into events: inout [epoll_event], timeoutMs: Int32) -> Int {
        precondition(!events.isEmpty, "epoll_wait needs room for at least one event")
        let n = events.withUnsafeMutableBufferPointer { buffer in
            // Unwrapped because glibc 2.41 (Debian 13) declares the array __nonnull and 2.36 does
            // not: a non-optional pointer is accepted by both declarations.
            epoll_wait(fd, buffer.baseAddress!, Int32(buffer.count), timeoutMs)
        }
        return max(Int(n), 0)
    }

    /// Wakes `wait` from another thread.
    /// An eventfd takes its 8 bytes whole or refuses them (a full counter, which wakes the loop anyway).
    package static func wake(_ wakeup: FileDescriptor) {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { try? wakeup.writeAll($0) }
    }

    package func drainWake() {
        var value: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &value) { try? wakeup.read(into: $0) }
    }
}

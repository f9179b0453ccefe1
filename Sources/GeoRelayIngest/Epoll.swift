import CLinux
import Glibc
import GeoRelayCore

/// Owns an epoll instance (level-triggered) and an eventfd to wake it from other threads.
///
/// Not `Sendable` except for `wake()`, which any thread may call.
final class Epoll {
    private let instance: FileDescriptor
    /// The eventfd that `wake(_:)` writes; other threads hold it to wake the loop.
    let wakeup: FileDescriptor
    var fd: Int32 { instance.number }
    /// The token reported for the wake eventfd.
    static let wakeToken: UInt64 = .max

    init() throws(SystemError) {
        instance = FileDescriptor(adopting: try syscall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) })
        wakeup = FileDescriptor(adopting: try syscall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) })
        try add(wakeup.number, token: Self.wakeToken, events: EPOLLIN.rawValue)
    }

    func add(_ target: Int32, token: UInt64, events: UInt32) throws(SystemError) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        try syscall("epoll_ctl(ADD)") { epoll_ctl(fd, EPOLL_CTL_ADD, target, &event) }
    }

    func modify(_ target: Int32, token: UInt64, events: UInt32) throws(SystemError) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        try syscall("epoll_ctl(MOD)") { epoll_ctl(fd, EPOLL_CTL_MOD, target, &event) }
    }

    func remove(_ target: Int32) {
        var event = epoll_event()
        _ = epoll_ctl(fd, EPOLL_CTL_DEL, target, &event)
    }

    /// Waits for events; `timeoutMs` -1 waits for ever (no polling when idle).
    func wait(into events: inout [epoll_event], timeoutMs: Int32) -> Int {
        let n = events.withUnsafeMutableBufferPointer { buffer in
            epoll_wait(fd, buffer.baseAddress, Int32(buffer.count), timeoutMs)
        }
        return max(Int(n), 0)
    }

    /// Wakes `wait` from another thread.
    /// An eventfd takes its 8 bytes whole or refuses them (a full counter, which wakes the loop anyway).
    static func wake(_ wakeup: FileDescriptor) {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { try? wakeup.writeAll($0) }
    }

    func drainWake() {
        var value: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &value) { try? wakeup.read(into: $0) }
    }
}

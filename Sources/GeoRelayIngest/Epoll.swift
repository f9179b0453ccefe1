import CLinux
import Glibc
import GeoRelayCore

/// Owns an epoll instance (level-triggered) and an eventfd to wake it from other threads.
///
/// Not `Sendable` except for `wake()`, which any thread may call.
final class Epoll {
    let fd: Int32
    let wakeFD: Int32
    /// The token reported for the wake eventfd.
    static let wakeToken: UInt64 = .max

    init() throws(SystemError) {
        fd = try syscall("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        do {
            wakeFD = try syscall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) }
        } catch {
            close(fd)
            throw error
        }
        try add(wakeFD, token: Self.wakeToken, events: EPOLLIN.rawValue)
    }

    deinit {
        close(wakeFD)
        close(fd)
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
    static func wake(_ wakeFD: Int32) {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    func drainWake() {
        var value: UInt64 = 0
        _ = read(wakeFD, &value, 8)
    }
}

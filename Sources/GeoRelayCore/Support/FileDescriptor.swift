import Glibc
import Synchronization

/// One open file descriptor the relay owns (a socket, a file, an epoll instance, an eventfd,
/// a pipe's end), closed exactly once: by `close()`, which reports what close(2) said, or by
/// `deinit` when the owner goes without closing it.
///
/// A bare `Int32` has no owner: two places could close it, and the second close would hit
/// whatever file the kernel gave that number to in between (a spool connection, another
/// client). Here the number is given up atomically on the first close and reads as -1 after,
/// so a late call on it fails with `EBADF` instead of reaching someone else's file.
///
/// `Sendable`: a listener's `stop()` may shut a socket down from another thread while its
/// loop owns it; the loop still decides when to close.
///
/// - Important: closing does not wake a thread blocked in a call on the descriptor; shut a
///   socket down (`shutdown(2)`) or signal the waiting loop first.
package final class FileDescriptor: Sendable {
    private let state: Atomic<Int32>

    /// Takes ownership of `number`, an open descriptor nobody else will close.
    package init(adopting number: Int32) {
        precondition(number >= 0, "FileDescriptor(adopting: \(number)): not an open descriptor")
        state = Atomic(number)
    }

    /// Opens `path` close-on-exec (`open(2)`'s `O_CLOEXEC` is always added: a child the relay
    /// starts must not inherit its spool or sockets).
    package static func open(_ path: String, _ flags: Int32, mode: mode_t = 0) throws(SystemError) -> FileDescriptor {
        FileDescriptor(adopting: try syscall("open", path) { Glibc.open(path, flags | O_CLOEXEC, mode) })
    }

    /// A new socket, close-on-exec (`SOCK_CLOEXEC` is always added).
    package static func socket(_ domain: Int32, _ type: Int32, context: @autoclosure () -> String = "")
        throws(SystemError) -> FileDescriptor
    {
        FileDescriptor(
            adopting: try syscall("socket", context()) { Glibc.socket(domain, type | Int32(SOCK_CLOEXEC.rawValue), 0) })
    }

    /// The descriptor's number for a system call; -1 once closed.
    package var number: Int32 { state.load(ordering: .acquiring) }

    package var isOpen: Bool { number >= 0 }

    /// Closes the descriptor; later calls do nothing, so it cannot be closed twice.
    ///
    /// Not retried on `EINTR`: Linux has released the number anyway, and a second close could
    /// hit a descriptor another thread has just been given. An error here (`EIO` from a file
    /// system that reports a failed write at close) is worth logging, not retrying.
    package func close() throws(SystemError) {
        let number = state.exchange(-1, ordering: .acquiringAndReleasing)
        guard number >= 0 else { return }
        if Glibc.close(number) != 0, Glibc.errno != EINTR {
            throw SystemError(call: "close", errno: Glibc.errno)
        }
    }

    /// Hands the number over to code that closes it itself (the test kit's servers, which
    /// track their sockets by number); this owner no longer closes it.
    package func release() -> Int32 {
        let number = state.exchange(-1, ordering: .acquiringAndReleasing)
        precondition(number >= 0, "FileDescriptor.release() after close() or release()")
        return number
    }

    deinit {
        let number = state.load(ordering: .acquiring)
        if number >= 0 { _ = Glibc.close(number) }
    }

    // MARK: - Reading and writing

    /// Reads what is there into `buffer`: the count (0 at end of file), or `.wouldBlock` on a
    /// non-blocking descriptor with nothing to read. Interrupted reads are retried.
    package func read(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> IOResult<Int> {
        try syscall(blocking: true, "read") { Glibc.read(number, buffer.baseAddress, buffer.count) }
    }

    /// Sends what a socket takes now of `bytes`, never raising `SIGPIPE` (a peer gone is an
    /// `EPIPE` error): the count taken, possibly short, or `.wouldBlock` when it takes nothing.
    package func send(_ bytes: UnsafeRawBufferPointer, flags: Int32 = 0) throws(SystemError) -> IOResult<Int> {
        try syscall(blocking: true, "send") {
            Glibc.send(number, bytes.baseAddress, bytes.count, flags | Int32(MSG_NOSIGNAL))
        }
    }

    /// Writes all of `bytes` to a blocking file, pipe or eventfd, however many calls it takes
    /// (a write may take only part: a signal mid-way, a file system near its quota).
    package func writeAll(_ bytes: UnsafeRawBufferPointer, context: @autoclosure () -> String = "") throws(SystemError)
    {
        try writeCompletely(bytes, call: "write", context()) { Glibc.write(number, $0.baseAddress, $0.count) }
    }

    /// Writes all of `bytes` (see `writeAll(_:context:)`).
    package func writeAll(_ bytes: [UInt8], context: @autoclosure () -> String = "") throws(SystemError) {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(SystemError) in try writeAll(raw, context: context()) }
        }
        try result.get()
    }

    /// Sends all of `bytes` (see `sendAll(_:context:)`).
    package func sendAll(_ bytes: [UInt8], context: @autoclosure () -> String = "") throws(SystemError) {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(SystemError) in try sendAll(raw, context: context()) }
        }
        try result.get()
    }

    /// Sends all of `bytes` on a blocking socket, however many calls it takes, without `SIGPIPE`.
    package func sendAll(_ bytes: UnsafeRawBufferPointer, context: @autoclosure () -> String = "") throws(SystemError) {
        try writeCompletely(bytes, call: "send", context()) {
            Glibc.send(number, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
        }
    }
}

/// Offers `write` the rest of `bytes` until it has taken them all: the one loop that finishes
/// short writes. `write` returns what a `write(2)`-like call returns (a count, or -1 with
/// `errno` set); `EINTR` is retried and any other failure thrown, `EAGAIN` included, since a
/// descriptor written this way is meant to block.
package func writeCompletely(
    _ bytes: UnsafeRawBufferPointer, call: String, _ context: @autoclosure () -> String = "",
    _ write: (UnsafeRawBufferPointer) -> Int
) throws(SystemError) {
    var offset = 0
    while offset < bytes.count {
        let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
        let taken = try syscall(call, context()) { write(rest) }
        // Zero for a non-empty write means no progress will come (a full device says ENOSPC instead).
        guard taken > 0 else { throw SystemError(call: call, errno: EIO, context: context()) }
        offset += taken
    }
}

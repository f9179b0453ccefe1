import GeoRelayCore
import Glibc

/// A pipe the engine's poll watches, so another thread can end a wait (shutdown, an alarm).
final class WakePipe: Sendable {
    private let reading: FileDescriptor
    private let writing: FileDescriptor

    init() throws(SystemError) {
        var ends: [Int32] = [0, 0]
        try syscall("pipe") { pipe(&ends) }
        reading = FileDescriptor(adopting: ends[0])
        writing = FileDescriptor(adopting: ends[1])
        // Both ends non-blocking: a full pipe already wakes the reader, and draining stops at empty.
        // (pipe2, which sets this at once, is not in Swift's Glibc module.)
        for end in [reading, writing] {
            let flags = try syscall("fcntl(F_GETFL)", "wake pipe") { fcntl(end.number, F_GETFL) }
            try syscall("fcntl(F_SETFL)", "wake pipe") { fcntl(end.number, F_SETFL, flags | O_NONBLOCK) }
            try syscall("fcntl(F_SETFD)", "wake pipe") { fcntl(end.number, F_SETFD, FD_CLOEXEC) }
        }
    }

    /// The end to poll for readable.
    var readEnd: Int32 { reading.number }

    /// Safe from any thread; a full pipe already wakes the reader.
    @Sendable func signal() {
        var byte: UInt8 = 1
        _ = withUnsafeBytes(of: &byte) { try? writing.writeAll($0) }
    }

    func drain() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while case .processed(let n)? = bytes.withUnsafeMutableBytes({ try? reading.read(into: $0) }), n > 0 {}
    }
}

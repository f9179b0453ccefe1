import CCurl
import Glibc

/// A pipe the engine's poll watches, so another thread can end a wait (shutdown, an alarm).
final class WakePipe: Sendable {
    let readEnd: Int32
    private let writeEnd: Int32

    init() throws {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else {
            throw CurlError(code: CURLE_FAILED_INIT.rawValue, message: "pipe failed: \(String(cString: strerror(errno)))")
        }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        readEnd = ends[0]
        writeEnd = ends[1]
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// Safe from any thread; a full pipe already wakes the reader.
    @Sendable func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    func drain() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(readEnd, &bytes, bytes.count) > 0 {}
    }
}

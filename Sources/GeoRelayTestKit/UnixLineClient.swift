import CLinux
import Foundation
import GeoRelayCore
import Glibc

/// A collector's end of the ingest socket: write lines, read reply lines.
/// Blocking I/O with a receive timeout, for tests and benchmarks.
/// `@unchecked Sendable`: a test hands it to one other thread at a time, never shares it.
package final class UnixLineClient: @unchecked Sendable {
    package let fd: Int32
    private var buffer: [UInt8] = []

    package init(path: String, receiveTimeoutSeconds: Int = 30) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError(call: "socket", errno: errno) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw SystemError(call: "connect", errno: code, context: path)
        }
        var timeout = timeval(tv_sec: receiveTimeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        self.fd = fd
    }

    deinit { close(fd) }

    /// Writes text as is (add the newlines yourself).
    package func write(_ text: String) throws {
        try write(Array(text.utf8))
    }

    package func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw SystemError(call: "send", errno: errno)
            }
            offset += n
        }
    }

    /// Closes the sending side: the relay answers what it has and then closes.
    package func finishWriting() {
        shutdown(fd, Int32(SHUT_WR))
    }

    /// The next reply line, or nil at end of stream (or timeout).
    package func readLine() -> String? {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = String(decoding: buffer[0..<newline], as: UTF8.self)
                buffer.removeFirst(newline + 1)
                return line
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 {
                if n < 0, errno == EINTR { continue }
                return nil
            }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }

    package func readLines(_ count: Int) -> [String] {
        var lines: [String] = []
        while lines.count < count, let line = readLine() { lines.append(line) }
        return lines
    }
}

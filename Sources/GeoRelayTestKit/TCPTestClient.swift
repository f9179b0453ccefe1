import CLinux
import Foundation
import GeoRelayCore
import Glibc

/// A device's end of a binary TCP protocol: write bytes, read exact answers.
/// Blocking I/O with a receive timeout, for tests and benchmarks.
/// `@unchecked Sendable`: a test hands it to one other thread at a time, never shares it.
package final class TCPTestClient: @unchecked Sendable {
    /// What a read ended with.
    package enum Read: Sendable, Equatable {
        case bytes([UInt8])
        /// The peer closed (or reset) the connection; the bytes that came before it.
        case closed(after: [UInt8])
        /// Nothing more within the receive timeout; the bytes that came before it.
        case timedOut(after: [UInt8])
    }

    package let fd: Int32

    /// Connects to `127.0.0.1:port` with Nagle off, so each write leaves as its own segment.
    /// - Parameter source: a loopback address to connect from (`127.0.0.2`): a test that holds
    ///   hundreds of connections takes its local ports there, never one another test's relay
    ///   is about to listen on at 127.0.0.1.
    package init(port: Int, receiveTimeout: Duration = .seconds(10), source: String? = nil) throws {
        let connected =
            source.map { Self.connect(port: port, from: $0) }
            ?? IPv4Socket.connect(host: "127.0.0.1", port: port)?.release()
        guard let fd = connected else {
            throw SystemError(call: "connect", errno: errno, context: "127.0.0.1:\(port)")
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let (seconds, attoseconds) = receiveTimeout.components
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        self.fd = fd
    }

    deinit { close(fd) }

    private static func connect(port: Int, from source: String) -> Int32? {
        guard let bound = try? IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: source, port: 0) else {
            return nil
        }
        let fd = bound.descriptor.number
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            try? bound.descriptor.close()
            errno = code
            return nil
        }
        return bound.descriptor.release()
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

    /// Reads exactly `count` bytes, unless the peer closes or the timeout passes first.
    package func read(_ count: Int) -> Read {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: max(count, 1))
        while received.count < count {
            let wanted = count - received.count
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, wanted, 0) }
            if n > 0 {
                received += chunk[0..<n]
                continue
            }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK { return .timedOut(after: received) }
            return .closed(after: received)
        }
        return .bytes(received)
    }

    /// Reads until the peer closes (or the timeout passes).
    package func readToEnd() -> Read {
        var received: [UInt8] = []
        while true {
            switch read(4096) {
            case .bytes(let bytes): received += bytes
            case .closed(let bytes): return .closed(after: received + bytes)
            case .timedOut(let bytes): return .timedOut(after: received + bytes)
            }
        }
    }
}

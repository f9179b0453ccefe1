import Glibc

/// IPv4 sockets on a host and port: the one place that spells out `sockaddr_in`, shared by the
/// HTTP listener, the UDP collector and the test kit's servers and proxy.
package enum IPv4Socket {
    /// A new socket of `type` (`SOCK_STREAM`, `SOCK_DGRAM`) bound to `host:port`, listening when
    /// `backlog` is given. Port 0 lets the kernel pick; the port actually bound is returned, so
    /// tests can use ephemeral ports without a race.
    ///
    /// Every step is checked: a socket whose `SO_REUSEADDR` or `getsockname` failed would be
    /// refused after a restart or report port 0, and either is better said here.
    package static func bind(type: Int32, host: String, port: UInt16, backlog: Int32? = nil) throws(SystemError) -> (
        descriptor: FileDescriptor, port: Int
    ) {
        let place = "\(host):\(port)"
        let socket = try FileDescriptor.socket(AF_INET, type, context: place)
        var one: Int32 = 1
        try syscall("setsockopt(SO_REUSEADDR)", place) {
            setsockopt(socket.number, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = Self.address(host: host, port: port)
        try syscall("bind", place) {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.bind(socket.number, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        if let backlog { try syscall("listen", place) { listen(socket.number, backlog) } }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try syscall("getsockname", place) {
            withUnsafeMutablePointer(to: &actual) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket.number, $0, &length) }
            }
        }
        return (socket, Int(UInt16(bigEndian: actual.sin_port)))
    }

    /// A TCP connection to `host:port`, or nil with `errno` set.
    package static func connect(host: String, port: Int) -> FileDescriptor? {
        guard let socket = try? FileDescriptor.socket(AF_INET, Int32(SOCK_STREAM.rawValue)) else { return nil }
        var address = Self.address(host: host, port: UInt16(port))
        // Not through syscall(): a connect interrupted by a signal goes on in the background,
        // and calling it again answers EALREADY, not the outcome.
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket.number, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            let code = errno
            try? socket.close()
            errno = code
            return nil
        }
        return socket
    }

    /// The dotted addresses of a connected socket's two ends (empty where the kernel cannot say):
    /// the local one is an address of this box, the one the client reached it at.
    package static func endpoints(_ fd: Int32) -> (local: String, peer: String) {
        func text(_ get: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32) -> String {
            var address = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let result = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { get(fd, $0, &length) }
            }
            guard result == 0, address.sin_family == sa_family_t(AF_INET) else { return "" }
            var buffer = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            guard inet_ntop(AF_INET, &address.sin_addr, &buffer, socklen_t(buffer.count)) != nil else { return "" }
            return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return (text { getsockname($0, $1, $2) }, text { getpeername($0, $1, $2) })
    }

    private static func address(host: String, port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(port.bigEndian)
        address.sin_addr.s_addr = inet_addr(host)
        return address
    }
}

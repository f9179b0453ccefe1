import Glibc

/// IPv4 sockets on a host and port: the one place that spells out `sockaddr_in`, shared by the
/// HTTP listener, the UDP collector and the test kit's servers and proxy.
package enum IPv4Socket {
    /// A new socket of `type` (`SOCK_STREAM`, `SOCK_DGRAM`) bound to `host:port`, listening when
    /// `backlog` is given. Port 0 lets the kernel pick; the port actually bound is returned, so
    /// tests can use ephemeral ports without a race.
    package static func bind(type: Int32, host: String, port: UInt16, backlog: Int32? = nil) throws(SystemError) -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, type | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError(call: "socket", errno: errno, context: "\(host):\(port)") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.address(host: host, port: port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if bound != 0 || (backlog.map { listen(fd, $0) } ?? 0) != 0 {
            let code = errno
            close(fd)
            throw SystemError(call: bound != 0 ? "bind" : "listen", errno: code, context: "\(host):\(port)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return (fd, Int(UInt16(bigEndian: actual.sin_port)))
    }

    /// A TCP connection to `host:port`, or nil with `errno` set.
    package static func connect(host: String, port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = Self.address(host: host, port: UInt16(port))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            close(fd)
            errno = code
            return nil
        }
        return fd
    }

    private static func address(host: String, port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(port.bigEndian)
        address.sin_addr.s_addr = inet_addr(host)
        return address
    }
}

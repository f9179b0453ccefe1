import Glibc

/// Whether a plain socket (without `SO_REUSEADDR`) can bind `port` on loopback now: nothing holds
/// it, neither a listener nor a stopped one's reservation nor a connection's local end.
package func loopbackPortIsFree(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0, let number = UInt16(exactly: port) else { return false }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = number.bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    } == 0
}

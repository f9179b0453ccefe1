import Foundation
import Glibc

/// The kernel's IPv4 socket tables (`/proc/net/udp`, `/proc/net/tcp`), for states that no
/// process announces but a test must await: which port a child process bound, and whether the
/// reader of a TCP stream has taken everything written to it.
///
/// Linux only, like the rest of the suite; the tables hold every socket of the network
/// namespace, so lookups match on ports (and inodes) rather than taking the first row.
package enum SocketTable {
    /// One row of a table.
    package struct Row: Equatable, Sendable {
        package var localPort: Int
        package var remotePort: Int
        /// TCP: bytes written and not yet acknowledged by the peer. UDP: bytes queued to send.
        package var transmitQueue: Int
        /// TCP: bytes received and not yet read by the owner. UDP: bytes waiting to be read.
        package var receiveQueue: Int
        package var inode: Int
    }

    /// The local ports of the UDP sockets that process `pid` holds open, from its descriptors'
    /// socket inodes; empty while it has bound none (or has exited).
    package static func udpPorts(ofProcess pid: Int32) -> [Int] {
        let inodes = socketInodes(ofProcess: pid)
        guard !inodes.isEmpty else { return [] }
        return rows("/proc/net/udp").filter { inodes.contains($0.inode) }.map(\.localPort)
    }

    /// Every IPv4 TCP socket's row, read in one pass (both ends of a loopback connection appear).
    package static func tcpRows() -> [Row] { rows("/proc/net/tcp") }

    /// The socket inodes among `pid`'s open descriptors (`socket:[12345]` links).
    static func socketInodes(ofProcess pid: Int32) -> Set<Int> {
        let directory = "/proc/\(pid)/fd"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var inodes = Set<Int>()
        for name in names {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\(name)"),
                target.hasPrefix("socket:["), target.hasSuffix("]"),
                let inode = Int(target.dropFirst("socket:[".count).dropLast())
            else { continue }
            inodes.insert(inode)
        }
        return inodes
    }

    /// A `/proc` file read to its end. Foundation's readers stop after the first page of these
    /// zero-sized files, which with a few hundred sockets open is a small part of the table.
    static func wholeFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { return String(decoding: bytes, as: UTF8.self) }
            bytes += chunk[0..<n]
        }
    }

    /// `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …`,
    /// addresses as `HEXADDR:HEXPORT`.
    static func rows(_ path: String) -> [Row] {
        guard let text = wholeFile(path) else { return [] }
        return text.split(separator: "\n").dropFirst().compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count > 9 else { return nil }
            func port(_ address: Substring) -> Int? {
                address.split(separator: ":").last.flatMap { Int($0, radix: 16) }
            }
            let queues = fields[4].split(separator: ":")
            guard let local = port(fields[1]), let remote = port(fields[2]), queues.count == 2,
                let transmit = Int(queues[0], radix: 16), let receive = Int(queues[1], radix: 16),
                let inode = Int(fields[9])
            else { return nil }
            return Row(
                localPort: local, remotePort: remote, transmitQueue: transmit, receiveQueue: receive, inode: inode)
        }
    }
}

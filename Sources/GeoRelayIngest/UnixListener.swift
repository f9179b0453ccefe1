import CLinux
import FoundationEssentials
import GeoRelayCore
import Glibc

/// Why ingest could not start.
package struct IngestStartError: Error, Sendable, CustomStringConvertible {
    package let description: String
}

/// Creates the relay's listening Unix socket.
///
/// A socket file left by a crashed relay is replaced; one that answers a
/// connect belongs to a live relay and is an error, since two relays on one
/// spool would both think they own it.
enum UnixListener {
    static func listen(path: String, backlog: Int32 = 1024) throws(IngestStartError) -> FileDescriptor {
        let directory = Paths.directory(of: path)
        if !directory.isEmpty, !FileManager.default.fileExists(atPath: directory) {
            try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        var info = stat()
        if lstat(path, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw IngestStartError(description: "ingest.socket \(path) exists and is not a socket")
            }
            if isLive(path: path) {
                throw IngestStartError(description: "another relay is listening on \(path)")
            }
            unlink(path)
        }
        do throws(SystemError) {
            let socket = try FileDescriptor.socket(
                AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), context: path)
            _ = try withAddress(path) { (address, length) throws(SystemError) in
                try syscall("bind", path) { bind(socket.number, address, length) }
            }
            // 0660: collectors in the relay's group may write; nobody else.
            try syscall("chmod", path) { chmod(path, 0o660) }
            try syscall("listen", path) { Glibc.listen(socket.number, backlog) }
            return socket
        } catch {
            throw IngestStartError(description: "cannot listen on \(path): \(error)")
        }
    }

    /// Whether something accepts connections on `path`.
    static func isLive(path: String) -> Bool {
        guard let socket = try? FileDescriptor.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue)) else { return false }
        let result = try? withAddress(path) { address, length throws(SystemError) in
            try syscall("connect", path) { connect(socket.number, address, length) }
        }
        return result != nil
    }

    static func withAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws(SystemError) -> T)
        throws(SystemError) -> T
    {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw SystemError(call: "bind", errno: ENAMETOOLONG, context: path)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result: Result<T, SystemError> = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                do throws(SystemError) {
                    return .success(try body(sa, socklen_t(MemoryLayout<sockaddr_un>.size)))
                } catch {
                    return .failure(error)
                }
            }
        }
        return try result.get()
    }
}

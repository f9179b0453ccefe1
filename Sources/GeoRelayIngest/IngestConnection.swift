import CLinux
import GeoRelayCore
import Glibc

/// One collector's connection: its partial input line and its unsent output; what its
/// lines mean, and the replies in line order, are its `IngestSession`'s.
///
/// Owned by the event loop thread; never shared.
final class IngestConnection {
    let id: UInt64
    /// Closed by the loop, after taking it out of epoll, so the number is never reused while watched.
    let socket: FileDescriptor
    var fd: Int32 { socket.number }
    var session: IngestSession
    var input: [UInt8] = []
    /// Skipping the rest of an overlong line up to its newline.
    var discarding = false
    /// The peer closed its sending side; close once every reply is out.
    var inputClosed = false
    var readPaused = false
    var wantsWrite = false

    var output: [UInt8] = []
    var outputOffset = 0

    init(id: UInt64, socket: FileDescriptor, session: IngestSession) {
        self.id = id
        self.socket = socket
        self.session = session
    }

    /// Moves every known reply at the head into the output buffer.
    func collectReplies() {
        session.collectReplies(into: &output)
    }

    var unresolved: Int { session.unresolved }

    var pendingOutput: Int { output.count - outputOffset }

    /// Writes what the socket takes now. Returns false on a hard error.
    func flush() -> Bool {
        while outputOffset < output.count {
            let sent = output.withUnsafeBytes { raw in
                Result { () throws(SystemError) in
                    try socket.send(UnsafeRawBufferPointer(rebasing: raw[outputOffset...]))
                }
            }
            guard case .success(let result) = sent else { return false }
            guard case .processed(let n) = result else { break }
            // A zero-byte send of a non-empty buffer: nothing more will go out.
            guard n > 0 else { return false }
            outputOffset += n
        }
        if outputOffset == output.count {
            output.removeAll(keepingCapacity: output.capacity <= 1 << 16)
            outputOffset = 0
        } else if outputOffset > 1 << 16 {
            output.removeFirst(outputOffset)
            outputOffset = 0
        }
        return true
    }

    /// Done: the peer stopped sending and every reply has been written.
    var finished: Bool { inputClosed && unresolved == 0 && pendingOutput == 0 }
}

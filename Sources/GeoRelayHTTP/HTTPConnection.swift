import GeoRelayCore
import Glibc

/// One client connection of an HTTP listener: its socket, what has been read of the
/// request in progress, the answer being written, and where in a request's life it is.
///
/// Lives on the listener's loop thread only. The loop closes the descriptor (after taking it
/// out of epoll), so the number is never reused while epoll still watches it.
final class HTTPConnection {
    /// Where the connection is; each phase has its own deadline (``HTTPServerLoop``'s sweep).
    enum Phase {
        /// No byte of the next request yet: closed after the idle timeout; first to be evicted.
        case awaiting
        /// Part of a head read: the request must be whole by `sinceMs` plus the request timeout.
        case head(sinceMs: Int64)
        /// The head parsed, the body being read.
        case body(HTTPRequestHead, sinceMs: Int64)
        /// With a handler; nothing is read meanwhile (pipelined requests wait in the kernel).
        case handling(keepAlive: Bool, http10: Bool)
        /// The answer being written; `close` after it.
        case writing(close: Bool, sinceMs: Int64)
        /// Answered and shut for writing; input is read and thrown away for a moment so the
        /// answer is not lost to a reset, then the connection closes.
        case lingering(untilMs: Int64, discarded: Int)
    }

    let id: UInt64
    let socket: FileDescriptor
    var fd: Int32 { socket.number }
    var phase: Phase = .awaiting
    /// Bytes read and not yet consumed: at most one request's head and body.
    var input: [UInt8] = []
    /// How far `input` has been searched for the end of the head.
    var scanned = 0
    var output: [UInt8] = []
    var outputOffset = 0
    var lastActivityMs: Int64
    /// The events epoll watches for now.
    var interest: UInt32
    /// The client shut its side: nothing more will come.
    var peerClosed = false
    var isClosed = false

    /// The client's address and the box's address it reached (``IPv4Socket/endpoints(_:)``).
    let peer: String
    let local: String

    init(id: UInt64, socket: FileDescriptor, nowMs: Int64, interest: UInt32) {
        self.id = id
        self.socket = socket
        (local, peer) = IPv4Socket.endpoints(socket.number)
        self.lastActivityMs = nowMs
        self.interest = interest
    }

    /// Whether the connection waits for (more of) a request.
    var isReading: Bool {
        switch phase {
        case .awaiting, .head, .body: return true
        case .handling, .writing, .lingering: return false
        }
    }

    /// Where the head ends: the offset of its empty line's CRLFCRLF (or of a bare LF LF, which
    /// the parser refuses, rather than waiting for a CRLF that never comes) and that
    /// terminator's length. Searches only bytes not searched before.
    func headEnd() -> (offset: Int, length: Int)? {
        let count = input.count
        let from = max(1, scanned - 3)
        scanned = count
        return input.withUnsafeBufferPointer { bytes -> (Int, Int)? in
            var i = from
            while i < count {
                if bytes[i] == 10 {
                    if bytes[i - 1] == 10 { return (i - 1, 2) }
                    if i >= 3, bytes[i - 1] == 13, bytes[i - 2] == 10, bytes[i - 3] == 13 { return (i - 3, 4) }
                }
                i += 1
            }
            return nil
        }
    }

    /// Whether the kernel holds bytes the loop has not read yet: an `awaiting` connection with
    /// some is a request arriving, not an idle one (one the client closed, nothing waiting, is
    /// as idle as they come). Asked only when choosing whom to evict, so a peek per candidate
    /// costs nothing in the common case.
    var hasUnreadInput: Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) > 0
    }

    /// Whether the request line is still unfinished past `limit` bytes.
    func requestLineExceeds(_ limit: Int) -> Bool {
        guard input.count > limit else { return false }
        return !input[0...limit].contains(10)
    }
}

@available(*, unavailable)
extension HTTPConnection: Sendable {}

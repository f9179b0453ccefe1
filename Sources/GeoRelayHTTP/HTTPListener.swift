import CLinux
import GeoRelayCore
import Glibc
import Synchronization

/// The relay's own HTTP/1.1 server, for the ports the boat's LAN reaches: phones
/// (the OsmAnd listener), Prometheus (`/metrics`, `/healthz`).
///
/// One event-loop thread (epoll, non-blocking sockets) reads and writes every connection
/// and a small pool of handler threads runs the handlers, which block (a phone's answer
/// waits for the spool's commit). Every resource a client can make the listener hold is
/// bounded by ``Limits``: connections (at the limit, the longest-idle one is closed to let
/// the new one in, so idle or reconnecting clients cannot keep a phone out), the head and
/// body of a request (each over its limit answered 414, 431 or 413 and closed without
/// reading it into memory), and time (a request must be whole within `requestTimeout`, so a
/// byte-a-second client is answered 408; a kept-alive connection with nothing to say is
/// closed after `idleTimeout`).
///
/// - Important: `stop()` stops accepting at once; requests already with a handler are
///   answered (for up to 2 s) before their connections close.
package final class HTTPListener: Sendable {
    package typealias Request = HTTPServerRequest
    package typealias Response = HTTPServerResponse

    /// What one client can make the listener hold. The defaults fit phones and a scraper on a
    /// boat's LAN with room to spare; what goes over is answered, never buffered.
    package struct Limits: Sendable {
        /// Connections open at once. At the limit a new connection closes the longest-idle one
        /// (then the oldest one still sending its request); only when every connection has a
        /// request with a handler is the new one answered 503 and closed.
        package var maxConnections = 256
        /// The request line (method, target, version); longer is answered 414.
        package var maxRequestLineBytes = 8 * 1024
        /// The request line and headers together; more is answered 431.
        package var maxHeadBytes = 16 * 1024
        /// Header lines; more is answered 431.
        package var maxHeaderCount = 100
        /// A body, as announced by `Content-Length`; more is answered 413 before it is read.
        package var maxBodyBytes = 64 * 1024
        /// From a request's first byte until it is whole, and for writing its answer; a client
        /// slower than that is answered 408 (or, while writing, dropped).
        package var requestTimeout: Duration = .seconds(10)
        /// How long a kept-alive connection may wait for its next request.
        package var idleTimeout: Duration = .seconds(30)
        /// Threads running handlers; as many requests are with a handler at once.
        package var handlerThreads = 8

        package init() {}
    }

    /// Counts since the start, for tests and the benchmark.
    package struct Statistics: Sendable, Equatable {
        package var accepted = 0
        /// Connections closed to let a new one in (``Limits/maxConnections``).
        package var evicted = 0
        /// Connections answered 503 at the limit, every open one having a request in hand.
        package var refused = 0
        /// Kept-alive connections closed after ``Limits/idleTimeout``.
        package var idleClosed = 0
        /// Requests handed to the handler.
        package var handled = 0
        /// Answers the listener gave itself (400, 408, 413, 414, 431, …), by status.
        package var answeredByListener: [Int: Int] = [:]
        /// Connections open now.
        package var open = 0
    }

    package let port: Int
    private let loop: HTTPServerLoop
    /// The loop's listening socket: `stop()` shuts it down from here, the loop closes it.
    private let listener: FileDescriptor
    private let stopped = Atomic<Bool>(false)

    /// Listens on `HOST:PORT` (connections wait in the socket's queue) for `run()` to serve;
    /// `what` names the setting in errors and logs (`ingest.http.listen`). The limits' timeouts
    /// and the warnings' rate are measured on `clock`, the relay's.
    package init(
        listen: String, what: String, limits: Limits = Limits(), logger: Logger? = nil,
        clock: any RelayClock = SystemClock(), handler: @escaping @Sendable (Request) -> Response
    ) throws(HTTPListenError) {
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw HTTPListenError(description: "\(what) \(listen): expected HOST:PORT")
        }
        let host = String(listen[..<colon])
        let socket: (descriptor: FileDescriptor, port: Int)
        do {
            socket = try IPv4Socket.bind(
                type: Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                host: host.isEmpty ? "0.0.0.0" : host, port: port, backlog: 128)
        } catch {
            throw HTTPListenError(
                description: "cannot listen on \(listen) (\(what)): \(String(cString: strerror(error.errno)))")
        }
        let loop: HTTPServerLoop
        do {
            // On failure the socket closes with its owner, here.
            loop = try HTTPServerLoop(
                listener: socket.descriptor, what: what, limits: limits, logger: logger, clock: clock,
                handler: handler)
        } catch {
            throw HTTPListenError(description: "cannot start the HTTP listener on \(listen) (\(what)): \(error)")
        }
        self.port = socket.port
        self.listener = socket.descriptor
        self.loop = loop
    }

    /// Serves on a thread of its own (the loop blocks in `epoll_wait`, its handlers on threads of
    /// theirs) until `stop()`, and returns when every connection is closed. Once only. Cancelling
    /// it stops the listener.
    package func run() async {
        let loop = self.loop
        await withTaskCancellationHandler {
            await withCheckedContinuation { (ended: CheckedContinuation<Void, Never>) in
                startThread(named: "georelay-http") {
                    loop.run()
                    ended.resume()
                }
            }
        } onCancel: {
            stop()
        }
    }

    /// Stops accepting at once (a connect is refused from here on); what handlers hold is
    /// answered, then every connection closes. Safe to call more than once.
    package func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // Only the loop closes the descriptor, and only after requestStop(): this number is still ours.
        loop.announceStop()
        shutdown(listener.number, Int32(SHUT_RDWR))
        loop.requestStop()
    }

    package var statistics: Statistics { loop.statistics.withLock { $0 } }
}

/// Why an HTTP listener could not start: the address, the setting that named it and the
/// system's reason. Its own type, so the metrics port does not fail with an ingest error.
package struct HTTPListenError: Error, Sendable, CustomStringConvertible {
    package let description: String
}

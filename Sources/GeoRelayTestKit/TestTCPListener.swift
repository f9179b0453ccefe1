import CLinux
import Foundation
import GeoRelayCore
import Glibc
import Synchronization

/// The listening half of the fake servers: a TCP listener on loopback with a thread per
/// connection, which can be stopped and started again on the same port (the destination going
/// away and coming back).
///
/// `serve` runs on the connection's own thread with the socket and the connection's number (1 for
/// the first accepted); the listener closes the socket when it returns, and `stop` shuts every
/// open one down, so a thread blocked reading wakes up.
///
/// Descriptors: each has one owner thread that alone closes it (the accept thread its listening
/// socket, a connection's thread its socket), and closes it under the lock; `stop` shuts them
/// down, from whatever thread, under the same lock. A number `stop` touches is therefore still the
/// listener's own, never one another test's socket got after a close (tests run in parallel in
/// one process and the kernel hands out the lowest free number). The accept thread keeps its
/// socket only while it accepts on it: it never leaves a port listening that nobody accepts on,
/// where connections would complete and then wait unanswered.
package final class TestTCPListener: Sendable {
    package typealias Serve = @Sendable (_ fd: Int32, _ number: Int) -> Void

    private struct State {
        /// The socket the current accept thread listens on, -1 once `stop` has shut it down.
        /// The thread closes its socket when this no longer names it.
        var listenFD: Int32 = -1
        /// Connections whose threads are serving them (they close them, and leave this set, under the lock).
        var connections: Set<Int32> = []
        var accepted = 0
        /// While stopped: a socket bound to the port and not listening, so no other socket (an
        /// outgoing connection's ephemeral end included) takes the port before `start` reopens it,
        /// and connections are still refused. -1 when none.
        var reservation: Int32 = -1
    }

    private let state = Mutex(State())
    private let portValue = Atomic<Int>(0)
    private let name: String
    private let backlog: Int32
    private let host: String
    private let serve: Serve

    package var port: Int { portValue.load(ordering: .relaxed) }
    package var connectionsAccepted: Int { state.withLock { $0.accepted } }

    /// Starts on an ephemeral loopback port.
    /// - Parameter name: names the threads, for a debugger.
    /// - Parameter host: the address to listen on: loopback, or (inside a test's network
    ///   namespace) `0.0.0.0`.
    package init(name: String, backlog: Int32 = 128, host: String = "127.0.0.1", serve: @escaping Serve) throws {
        self.name = name
        self.backlog = backlog
        self.host = host
        self.serve = serve
        try start(port: 0)
    }

    /// Listens (again) on `port` (0: any free port).
    ///
    /// Works at once after `stop`, before the old accept thread has closed its socket: a listening
    /// socket that has been shut down, like `stop`'s reservation, is bound without listening and
    /// so does not hold its port against `SO_REUSEADDR`.
    /// - Precondition: not listening (a stopped listener is started again, not a running one).
    package func start(port: Int) throws {
        let socket = try IPv4Socket.bind(
            type: Int32(SOCK_STREAM.rawValue), host: host, port: UInt16(port), backlog: backlog)
        let (fd, bound) = (socket.descriptor.release(), socket.port)
        state.withLock { state in
            precondition(
                state.listenFD < 0, "TestTCPListener \(name): start(port: \(port)) while listening on \(self.port)")
            state.listenFD = fd
            if state.reservation >= 0 {
                close(state.reservation)
                state.reservation = -1
            }
        }
        portValue.store(bound, ordering: .relaxed)
        let thread = Thread { [self] in acceptLoop(fd) }
        thread.name = "\(name)-accept"
        thread.start()
    }

    /// Refuses new connections from now on and shuts every open one down: the server is gone.
    ///
    /// Returns without waiting: the threads close their descriptors as they wake (see the type's
    /// comment). Connections arriving after it are refused, as by a stopped server, and the port
    /// stays reserved for `start(port:)` (see `State.reservation`).
    package func stop() {
        state.withLock { state in
            if state.listenFD >= 0 {
                // A shut-down listening socket leaves the listen table (new connections are
                // refused) and makes the blocked accept4 return EINVAL.
                shutdown(state.listenFD, Int32(SHUT_RDWR))
                state.listenFD = -1
                // Best effort: without it a restart on this port is as likely to work as before.
                if state.reservation < 0,
                    let held = try? IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: host, port: UInt16(port))
                {
                    state.reservation = held.descriptor.release()
                }
            }
            for fd in state.connections { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    deinit {
        stop()
        state.withLock { state in
            if state.reservation >= 0 { close(state.reservation) }
            state.reservation = -1
        }
    }

    private enum AcceptStep {
        case serve(Int)
        case retry
        case backOff
        case end
    }

    /// The accept thread: owns `listener` from `start` until it closes it, when `stop` has shut it
    /// down or the socket can no longer accept.
    private func acceptLoop(_ listener: Int32) {
        while true {
            let fd = accept4(listener, nil, nil, Int32(SOCK_CLOEXEC.rawValue))
            let code = errno
            let step = state.withLock { state -> AcceptStep in
                guard state.listenFD == listener else {
                    // Stopped (and maybe started again on another socket): this one is done.
                    if fd >= 0 { close(fd) }
                    close(listener)
                    return .end
                }
                if fd >= 0 {
                    state.connections.insert(fd)
                    state.accepted += 1
                    return .serve(state.accepted)
                }
                switch code {
                case EINTR, ECONNABORTED, EPROTO, EPERM, ENETDOWN, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH,
                    EOPNOTSUPP, ENETUNREACH:
                    // A connection that failed before it was accepted (accept(2) reports its error): the next one may not.
                    return .retry
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    return .backOff
                default:
                    // The socket itself cannot accept: close it, so clients are refused rather
                    // than left in a backlog nobody reads.
                    state.listenFD = -1
                    close(listener)
                    return .end
                }
            }
            switch step {
            case .end:
                return
            case .retry:
                continue
            case .backOff:
                // Out of descriptors or memory, for a moment: the kernel keeps the connection queued.
                usleep(10_000)
                continue
            case .serve(let number):
                var one: Int32 = 1
                setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                let thread = Thread { [self] in
                    serve(fd, number)
                    state.withLock { state in
                        state.connections.remove(fd)
                        close(fd)
                    }
                }
                thread.name = "\(name)-conn"
                thread.start()
            }
        }
    }
}

/// A weak reference for a server's connection callbacks, set once the server is built: the
/// listener it owns must not keep it alive.
package final class WeakReference<Object: AnyObject & Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private weak var object: Object?

    package init() {}

    package var value: Object? {
        get { lock.withLock { object } }
        set { lock.withLock { object = newValue } }
    }
}

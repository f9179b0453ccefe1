import CLinux
import Foundation
import Glibc
import GeoRelayCore
import Synchronization

/// The listening half of the fake servers: a TCP listener on loopback with a thread per
/// connection, which can be stopped and started again on the same port (the destination going
/// away and coming back).
///
/// `serve` runs on the connection's own thread with the socket and the connection's number (1 for
/// the first accepted); the listener closes the socket when it returns, and `stop` shuts every
/// open one down, so a thread blocked reading wakes up.
package final class TestTCPListener: Sendable {
    package typealias Serve = @Sendable (_ fd: Int32, _ number: Int) -> Void

    private struct State {
        var listenFD: Int32 = -1
        var connections: Set<Int32> = []
        var accepted = 0
    }

    private let state = Mutex(State())
    private let portValue = Atomic<Int>(0)
    private let name: String
    private let backlog: Int32
    private let serve: Serve

    package var port: Int { portValue.load(ordering: .relaxed) }
    package var connectionsAccepted: Int { state.withLock { $0.accepted } }

    /// Starts on an ephemeral loopback port.
    /// - Parameter name: names the threads, for a debugger.
    package init(name: String, backlog: Int32 = 128, serve: @escaping Serve) throws {
        self.name = name
        self.backlog = backlog
        self.serve = serve
        try start(port: 0)
    }

    /// Listens (again) on `port` (0: any free port).
    package func start(port: Int) throws {
        let socket = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: UInt16(port), backlog: backlog)
        let (fd, bound) = (socket.descriptor.release(), socket.port)
        portValue.store(bound, ordering: .relaxed)
        state.withLock { $0.listenFD = fd }
        let thread = Thread { [self] in acceptLoop(fd) }
        thread.name = "\(name)-accept"
        thread.start()
    }

    /// Closes the listener and every open connection: the server is gone.
    package func stop() {
        let (listener, connections) = state.withLock { state in
            defer {
                state.listenFD = -1
                state.connections.removeAll()
            }
            return (state.listenFD, state.connections)
        }
        if listener >= 0 {
            shutdown(listener, Int32(SHUT_RDWR))
            close(listener)
        }
        for fd in connections { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    deinit { stop() }

    private func acceptLoop(_ listener: Int32) {
        while true {
            let fd = accept4(listener, nil, nil, Int32(SOCK_CLOEXEC.rawValue))
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            let number = state.withLock { state -> Int? in
                guard state.listenFD == listener else { return nil }
                state.connections.insert(fd)
                state.accepted += 1
                return state.accepted
            }
            guard let number else {
                close(fd)
                return
            }
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let thread = Thread { [self] in
                serve(fd, number)
                state.withLock { _ = $0.connections.remove(fd) }
                close(fd)
            }
            thread.name = "\(name)-conn"
            thread.start()
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

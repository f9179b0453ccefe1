import CLinux
import GeoRelayCore
import Glibc
import Synchronization

/// A collector's connection to the relay's socket, with acks on.
///
/// Lines go out in order and stay in memory until the relay answers them; when
/// the relay restarts, the link reconnects, says hello again and resends what
/// was not answered, so nothing the receiver sent while the collector ran is lost.
/// The buffer is bounded: a file or stdin source waits for room, a live source
/// (serial, network) drops its oldest unsent lines and says so.
package final class RelayLink: @unchecked Sendable {
    package struct Settings: Sendable {
        package var socketPath: String
        /// The hello line (device and `"ack": true`), or a hello without a device.
        package var hello: String
        package var maxBuffered = 10_000
        package init(socketPath: String, hello: String) {
            self.socketPath = socketPath
            self.hello = hello
        }
    }

    private struct Queue {
        var unsent: [String] = []
        var unanswered: [String] = []
        var dropped = 0
        var answered = 0
        var errors = 0
        var closed = false
        /// Unanswered lines a live source gave up (their slots stay, as markers, so the replies
        /// still pair with the lines they answer).
        var givenUp = 0
        var count: Int { unsent.count + unanswered.count - givenUp }

        /// Makes room for a live source: its oldest line, the one sent longest ago without an
        /// answer (it may yet be stored; only its resend is given up), else the oldest unsent.
        /// False when nothing can give way.
        mutating func giveWay() -> Bool {
            if let oldest = unanswered.firstIndex(where: {
                $0 != RelayLink.helloMarker && $0 != RelayLink.givenUpMarker
            }) {
                unanswered[oldest] = RelayLink.givenUpMarker
                givenUp += 1
            } else if !unsent.isEmpty {
                unsent.removeFirst()
            } else {
                return false
            }
            dropped += 1
            return true
        }
    }

    /// Stands for the hello in the unanswered lines: its answer comes first on each connection.
    fileprivate static let helloMarker = "\u{0}hello"
    /// Stands for a line a live source gave up while it waited for its answer.
    fileprivate static let givenUpMarker = "\u{0}given-up"

    private let settings: Settings
    private let logger: Logger
    /// What `finish`'s timeout is measured on.
    private let clock: any RelayClock
    private let queue = Mutex(Queue())
    private let room = MonotonicCondition()
    /// An eventfd that ends the link thread's poll when a line is queued or the link closes.
    private let wakeup: FileDescriptor

    package init(settings: Settings, logger: Logger, clock: any RelayClock = SystemClock()) throws {
        self.settings = settings
        self.logger = logger
        self.clock = clock
        wakeup = FileDescriptor(adopting: try syscall("eventfd") { eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) })
    }

    /// Starts the thread that connects, sends and reads the answers: its owner starts it, as
    /// every part of the relay is started, never its initialiser. Lines sent before it starts
    /// wait in the buffer.
    package func start() {
        startThread(named: "georelay-collect-link") { [self] in run() }
    }

    /// Queues a line (without its newline). When the buffer is full, a file or stdin waits for
    /// room; a `live` source never does (it would stop reading its receiver): its oldest unsent
    /// line gives way, or, when the relay has stopped answering, its oldest unanswered one.
    package func send(_ line: String, live: Bool) {
        room.lock()
        while queue.withLock({ $0.count >= settings.maxBuffered }) {
            if live, let dropped = queue.withLock({ q -> Int? in q.giveWay() ? q.dropped : nil }) {
                if dropped == 1 || dropped.isMultiple(of: 1000) {
                    logger.warning("the relay is not keeping up: gave up the oldest buffered line (\(dropped) so far)")
                }
                break
            }
            room.wait(seconds: 0.5)
        }
        room.unlock()
        queue.withLock { $0.unsent.append(line) }
        wake()
    }

    /// Waits until the relay has answered every line (or `timeout` seconds of the link's clock pass).
    @discardableResult
    package func finish(timeout: Double = .infinity) -> Bool {
        // A timeout that is not a number, or below zero, waits not at all; an endless one, 31 years.
        let deadline = nowMs() + (CheckedNumbers.milliseconds(seconds: min(timeout, 1e9), max: 1e9) ?? 0)
        room.lock()
        defer { room.unlock() }
        while queue.withLock({ $0.count > 0 }) {
            let left = deadline - nowMs()
            if left <= 0 { return false }
            room.wait(seconds: min(0.5, Double(left) / 1000))
        }
        return true
    }

    private func nowMs() -> Int64 { clock.monotonicMs() }

    package func close() {
        queue.withLock { $0.closed = true }
        wake()
    }

    package var stats: (answered: Int, errors: Int, dropped: Int, buffered: Int) {
        queue.withLock { ($0.answered, $0.errors, $0.dropped, $0.count) }
    }

    private func wake() {
        // An eventfd takes its 8 bytes whole or not at all; a full counter already wakes the thread.
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { try? wakeup.writeAll($0) }
    }

    // MARK: - The link thread

    private func run() {
        var delay = 0.2
        while !queue.withLock({ $0.closed }) {
            guard let socket = connect() else {
                sleepBlocking(seconds: delay)
                delay = min(delay * 2, 5)
                continue
            }
            delay = 0.2
            serve(socket)
            try? socket.close()
        }
    }

    private func connect() -> FileDescriptor? {
        guard let socket = try? FileDescriptor.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue)) else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(settings.socketPath.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) {
            $0.copyBytes(from: bytes)
            $0[bytes.count] = 0
        }
        // Not retried after EINTR (the connect goes on in the background): the next attempt comes after the backoff.
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket.number, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else { return nil }
        // Resend what the last connection left unanswered, before anything newer.
        let resent = queue.withLock { q -> Int in
            let lines = q.unanswered.filter { $0 != Self.helloMarker && $0 != Self.givenUpMarker }
            let count = lines.count
            q.unsent = lines + q.unsent
            q.unanswered.removeAll()
            q.givenUp = 0
            return count
        }
        if resent > 0 { logger.notice("reconnected to the relay: resending \(resent) unanswered lines") }
        // Whole or not at all: a hello cut short would run into the first line. A failed send
        // shows as the connection ending, and the lines are resent on the next one.
        let hello = Array((settings.hello + "\n").utf8)
        try? socket.sendAll(hello)
        // The hello's own answer comes first.
        queue.withLock { $0.unanswered.insert(Self.helloMarker, at: 0) }
        return socket
    }

    /// Writes queued lines and reads answers until the connection ends or the link closes.
    private func serve(_ socket: FileDescriptor) {
        var input: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var output: [UInt8] = []
        var offset = 0
        while true {
            if offset >= output.count {
                output.removeAll(keepingCapacity: true)
                offset = 0
                let batch = queue.withLock { q -> [String] in
                    let batch = Array(q.unsent.prefix(1000))
                    q.unsent.removeFirst(batch.count)
                    q.unanswered += batch
                    return batch
                }
                for line in batch {
                    output.append(contentsOf: line.utf8)
                    output.append(0x0A)
                }
            }
            if queue.withLock({ $0.closed && $0.count == 0 }) { return }
            var fds = [
                pollfd(
                    fd: socket.number, events: Int16(POLLIN) | (offset < output.count ? Int16(POLLOUT) : 0), revents: 0),
                pollfd(fd: wakeup.number, events: Int16(POLLIN), revents: 0),
            ]
            guard (try? syscall("poll") { poll(&fds, 2, 1000) }) != nil else { return }
            if fds[1].revents != 0 {
                var value: UInt64 = 0
                _ = withUnsafeMutableBytes(of: &value) { try? wakeup.read(into: $0) }
            }
            if fds[0].revents & Int16(POLLOUT) != 0, offset < output.count {
                let sent = output.withUnsafeBytes { try? socket.send(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
                switch sent {
                case .processed(let n)?: offset += n
                case .wouldBlock?: break
                case nil: return
                }
            }
            if fds[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                let received = chunk.withUnsafeMutableBytes { try? socket.read(into: $0) }
                if case .wouldBlock? = received { continue }
                guard case .processed(let n)? = received, n > 0 else {
                    logger.warning("the relay closed the connection; reconnecting")
                    return
                }
                input.append(contentsOf: chunk[0..<n])
                var answered = 0
                while let newline = input.firstIndex(of: 0x0A) {
                    let reply = String(decoding: input[0..<newline], as: UTF8.self)
                    input.removeFirst(newline + 1)
                    let line = queue.withLock { q -> String? in
                        guard !q.unanswered.isEmpty else { return nil }
                        let line = q.unanswered.removeFirst()
                        if line == Self.givenUpMarker { q.givenUp -= 1 }
                        return line
                    }
                    if reply.hasPrefix("err ") {
                        queue.withLock { $0.errors += 1 }
                        logger.warning("relay refused a line (\(reply.prefix(120))): \(line?.prefix(80) ?? "")")
                    }
                    if line != Self.helloMarker && line != Self.givenUpMarker { answered += 1 }
                }
                if answered > 0 {
                    queue.withLock { $0.answered += answered }
                    room.lock()
                    room.broadcast()
                    room.unlock()
                }
            }
        }
    }
}

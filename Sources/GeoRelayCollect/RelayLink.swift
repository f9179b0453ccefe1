import CLinux
import Foundation
import Glibc
import GeoRelayCore
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
        var count: Int { unsent.count + unanswered.count }
    }

    private let settings: Settings
    private let logger: Logger
    private let queue = Mutex(Queue())
    private let room = MonotonicCondition()
    private let wakeFD: Int32

    package init(settings: Settings, logger: Logger) throws {
        self.settings = settings
        self.logger = logger
        wakeFD = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard wakeFD >= 0 else { throw SystemError(call: "eventfd", errno: errno) }
        let thread = Thread { [self] in run() }
        thread.name = "georelay-collect-link"
        thread.start()
    }

    /// Queues a line (without its newline). `live` sources drop their oldest unsent line when full.
    package func send(_ line: String, live: Bool) {
        room.lock()
        while queue.withLock({ $0.count >= settings.maxBuffered }) {
            if live {
                let dropped = queue.withLock { q -> Bool in
                    guard !q.unsent.isEmpty else { return false }
                    q.unsent.removeFirst()
                    q.dropped += 1
                    return true
                }
                if dropped { break }
            }
            room.wait(seconds: 0.5)
        }
        room.unlock()
        queue.withLock { $0.unsent.append(line) }
        wake()
    }

    /// Waits until the relay has answered every line (or `timeout` passes).
    @discardableResult
    package func finish(timeout: TimeInterval = .infinity) -> Bool {
        let deadline = WallClock.monotonicMs() + Int64(min(timeout, 1e9) * 1000)
        room.lock()
        defer { room.unlock() }
        while queue.withLock({ $0.count > 0 }) {
            let left = deadline - WallClock.monotonicMs()
            if left <= 0 { return false }
            room.wait(seconds: min(0.5, Double(left) / 1000))
        }
        return true
    }

    package func close() {
        queue.withLock { $0.closed = true }
        wake()
    }

    package var stats: (answered: Int, errors: Int, dropped: Int, buffered: Int) {
        queue.withLock { ($0.answered, $0.errors, $0.dropped, $0.count) }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, 8)
    }

    // MARK: - The link thread

    private func run() {
        var delay = 0.2
        while !queue.withLock({ $0.closed }) {
            guard let fd = connect() else {
                Thread.sleep(forTimeInterval: delay)
                delay = min(delay * 2, 5)
                continue
            }
            delay = 0.2
            serve(fd)
            Glibc.close(fd)
        }
    }

    private func connect() -> Int32? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(settings.socketPath.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes); $0[bytes.count] = 0 }
        let result = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        guard result == 0 else {
            Glibc.close(fd)
            return nil
        }
        // Resend what the last connection left unanswered, before anything newer.
        let resent = queue.withLock { q -> Int in
            let lines = q.unanswered.filter { $0 != "\u{0}hello" }
            let count = lines.count
            q.unsent = lines + q.unsent
            q.unanswered.removeAll()
            return count
        }
        if resent > 0 { logger.notice("reconnected to the relay: resending \(resent) unanswered lines") }
        var hello = Array((settings.hello + "\n").utf8)
        _ = hello.withUnsafeMutableBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        // The hello's own answer comes first.
        queue.withLock { $0.unanswered.insert("\u{0}hello", at: 0) }
        return fd
    }

    /// Writes queued lines and reads answers until the connection ends or the link closes.
    private func serve(_ fd: Int32) {
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
            var fds = [pollfd(fd: fd, events: Int16(POLLIN) | (offset < output.count ? Int16(POLLOUT) : 0), revents: 0),
                       pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            let ready = poll(&fds, 2, 1000)
            if ready < 0, errno != EINTR { return }
            if fds[1].revents != 0 {
                var value: UInt64 = 0
                _ = Glibc.read(wakeFD, &value, 8)
            }
            if fds[0].revents & Int16(POLLOUT) != 0, offset < output.count {
                let n = output.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                if n < 0 { return }
                offset += n
            }
            if fds[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n <= 0 {
                    logger.warning("the relay closed the connection; reconnecting")
                    return
                }
                input.append(contentsOf: chunk[0..<n])
                var answered = 0
                while let newline = input.firstIndex(of: 0x0A) {
                    let reply = String(decoding: input[0..<newline], as: UTF8.self)
                    input.removeFirst(newline + 1)
                    let line = queue.withLock { q -> String? in q.unanswered.isEmpty ? nil : q.unanswered.removeFirst() }
                    if reply.hasPrefix("err ") {
                        queue.withLock { $0.errors += 1 }
                        logger.warning("relay refused a line (\(reply.prefix(120))): \(line?.prefix(80) ?? "")")
                    }
                    if line != "\u{0}hello" { answered += 1 }
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

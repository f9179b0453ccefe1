import CLinux
import Dispatch
import GeoRelayCore
import GeoRelaySpool
import Glibc
import Synchronization

/// The shore relay's Iridium DirectIP door (`ingest.sbd.directIP`): the gateway connects, writes
/// one mobile-originated message and closes, or waits for the confirmation when the account asks
/// for one (`ingest.sbd.confirm`). A message's positions are stored before it is confirmed;
/// one that cannot be filed (`DirectIPDoor`) is refused and nothing of it stored.
///
/// The gateway delivers a few messages a vessel an hour, so each connection has a thread of its
/// own, at most `maxConnections` at once (more are closed at once: the gateway retries), each
/// given `timeout` to send its whole message.
package final class DirectIPListener: Sendable {
    private let listener: FileDescriptor
    package let port: Int
    private let vessels: [SBDShore.Vessel]
    private let confirm: Bool
    private let spool: Spool
    private let logger: Logger
    private let clock: any RelayClock
    private let open = Atomic<Int>(0)
    private let notes = Mutex(RateLimiter(perWindow: 20, windowMs: 60_000))
    static let maxConnections = 8
    static let timeout = Duration.seconds(30)

    package init(
        listen: String, vessels: [SBDShore.Vessel], confirm: Bool, spool: Spool, logger: Logger,
        clock: any RelayClock = SystemClock()
    ) throws(IngestStartError) {
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw IngestStartError(description: "ingest.sbd.directIP \(listen): expected HOST:PORT")
        }
        do {
            let bound = try IPv4Socket.bind(
                type: Int32(SOCK_STREAM.rawValue), host: String(listen[..<colon]), port: port, backlog: 16)
            (listener, self.port) = (bound.descriptor, bound.port)
        } catch {
            throw IngestStartError(description: "ingest.sbd.directIP \(listen): \(error)")
        }
        self.vessels = vessels
        self.confirm = confirm
        self.spool = spool
        self.logger = logger
        self.clock = clock
        logger.info("sbd: Iridium DirectIP on \(listen), \(vessels.count) vessels")
    }

    /// Accepts until `stop()` or cancellation, on a thread of its own.
    package func run() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                startThread(named: "sbd-directip") { [self] in
                    acceptLoop()
                    done.resume()
                }
            }
        } onCancel: {
            stop()
        }
    }

    /// Wakes the accepting thread, which then closes the socket.
    package func stop() { _ = shutdown(listener.number, Int32(SHUT_RDWR)) }

    private func acceptLoop() {
        defer { try? listener.close() }
        while true {
            let client = accept4(listener.number, nil, nil, Int32(SOCK_CLOEXEC.rawValue))
            if client < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            let connection = FileDescriptor(adopting: client)
            guard open.add(1, ordering: .relaxed).newValue <= Self.maxConnections else {
                open.subtract(1, ordering: .relaxed)
                try? connection.close()
                continue
            }
            startThread(named: "sbd-directip-c") { [self] in
                serve(connection)
                open.subtract(1, ordering: .relaxed)
            }
        }
    }

    private func serve(_ connection: FileDescriptor) {
        defer { try? connection.close() }
        guard let bytes = readMessage(connection) else { return }
        var outcome = DirectIPDoor.outcome(bytes, vessels: vessels)
        if !outcome.positions.isEmpty { outcome.accepted = store(outcome.positions) && outcome.accepted }
        spool.add(counters: [
            outcome.accepted ? "ingest.sbd.messages" : "ingest.sbd.refused": 1,
            "ingest.sbd.positions": Int64(outcome.accepted ? outcome.positions.count : 0),
        ])
        if notes.withLock({ $0.allow(nowMs: clock.monotonicMs()) }) {
            if outcome.accepted { logger.info("sbd: \(outcome.note)") } else { logger.warning("sbd: \(outcome.note)") }
        }
        if confirm {
            try? connection.writeAll(DirectIPMessage.confirmation(taken: outcome.accepted), context: "DirectIP")
        }
    }

    /// The whole message, by the length it declares, within the timeout; nil otherwise.
    private func readMessage(_ connection: FileDescriptor) -> [UInt8]? {
        let deadlineMs = clock.monotonicMs() + 30_000
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while DirectIPMessage.expectedLength(bytes).map({ bytes.count < $0 }) ?? true {
            let leftMs = deadlineMs - clock.monotonicMs()
            guard leftMs > 0 else { return nil }
            var descriptor = pollfd(fd: connection.number, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, Int32(clamping: leftMs)) > 0 else { return nil }
            let read = chunk.withUnsafeMutableBytes { try? connection.read(into: $0) }
            guard case .processed(let count)? = read, count > 0 else { return bytes.isEmpty ? nil : bytes }
            bytes += chunk[..<count]
            if let expected = DirectIPMessage.expectedLength(bytes), bytes.count > expected { return bytes }
        }
        return bytes
    }

    /// Stores `positions`; whether every one is durable (already there counts).
    private func store(_ positions: [Position]) -> Bool {
        let results = Mutex<[AppendResult]>([])
        let done = DispatchSemaphore(value: 0)
        spool.append(positions) { stored in
            results.withLock { $0 = stored }
            done.signal()
        }
        done.wait()
        return results.withLock { $0 }.allSatisfy { $0.seq != nil }
    }
}

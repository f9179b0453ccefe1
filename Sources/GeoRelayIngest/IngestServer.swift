import CLinux
import GeoRelayCore
import GeoRelayHTTP
import GeoRelaySpool
import Glibc
import Synchronization

/// The Unix-socket line protocol: collectors write lines, the relay stores the
/// positions and, with acks on, answers every line in order.
///
/// One event-loop thread (epoll, level-triggered, non-blocking sockets) reads
/// every connection, decodes lines and hands each wake-up's positions to the
/// spool as one batch; the spool's commit completions come back through an
/// eventfd. A collector that stops reading its replies is paused on its own;
/// nobody else waits for it.
package final class IngestServer: Sendable {
    package struct Settings: Sendable {
        // No defaults of their own: the configuration's are the only ones.
        package var socketPath: String
        package var maxLineBytes: Int
        package var maxFutureSeconds: Int
        package var maxConnections: Int
        package var nmeaAccuracyPerHDOP: Double?
        /// Devices fed by several receivers, best first.
        package var devices: [Configuration.DeviceSources] = []
        /// The phone port's admission when it listens (`ingest.http`): the socket's sessions tell
        /// it which ids collectors feed.
        package var phones: PhoneAdmission?
        /// The longest the event loop waits before it turns over (and beats) with nothing to do.
        package var turnInterval: Duration = Heartbeat.turnInterval
        /// The relay's time: what fix times are judged against, quiet fix cycles and a stop's
        /// grace measured by, and the loop's heartbeat kept on.
        package var clock: any RelayClock = SystemClock()

        package init(socketPath: String) {
            self.init(Configuration.IngestSettings())
            self.socketPath = socketPath
        }

        package init(_ configuration: Configuration.IngestSettings) {
            socketPath = configuration.socket
            maxLineBytes = configuration.maxLineBytes
            maxFutureSeconds = configuration.maxFutureSeconds
            maxConnections = configuration.maxConnections
            nmeaAccuracyPerHDOP = configuration.nmeaAccuracyPerHDOP
        }

        package init(_ configuration: Configuration) {
            self.init(configuration.ingest)
            devices = configuration.devices
            if configuration.ingest.httpListen != nil { phones = PhoneAdmission(allowed: configuration.phoneDevices) }
        }
    }

    /// Commit results waiting for the loop.
    struct Completion: Sendable {
        var tokens: [Token]
        var results: [AppendResult]
    }

    struct Token: Sendable {
        var connection: UInt64
        /// The lines this position answers (one line's, or every NMEA line of a fix cycle; none
        /// when the connection has acks off); nil for a routed copy, which answers nothing.
        var ticket: IngestSession.Ticket?
    }

    private let loop: IngestLoop
    private let wakeup: FileDescriptor
    /// What every session shares (decoder, router, clocks); the phone listener's sessions too,
    /// so a phone listed as a device's source is routed as a collector is.
    package let rules: IngestSession.Rules
    /// The event loop's turns: it beats after every wait, so an idle loop beats each `turnInterval`.
    package var heartbeat: Heartbeat { loop.heartbeat }
    private let stopped = Waiters()

    /// Continuations waiting for the loop thread to end; nil once it has.
    final class Waiters: Sendable {
        let list = Mutex<[CheckedContinuation<Void, Never>]?>([])
    }

    /// Binds the socket, so collectors can connect (their lines wait in the socket's queue) from
    /// here on; `run()` reads and answers them.
    package init(settings: Settings, spool: Spool, logger: Logger) throws(IngestStartError) {
        let listener = try UnixListener.listen(path: settings.socketPath)
        let clock = settings.clock
        let router = SourceRouter(devices: settings.devices, logger: logger) { device, transition in
            spool.record(
                integrity: IntegrityRecord(
                    device: device, state: transition.to.rawValue, sinceMs: clock.nowMs(),
                    evidence: transition.evidence.map(\.description).joined(separator: "; ")),
                beganEpisode: transition.alarm)
        }
        var rules = IngestSession.Rules(
            decoder: LineDecoder(maxFutureSeconds: settings.maxFutureSeconds),
            router: router, clock: IngestClock(settings.clock),
            maxLineBytes: settings.maxLineBytes, nmeaAccuracyPerHDOP: settings.nmeaAccuracyPerHDOP)
        rules.phones = settings.phones
        self.rules = rules
        let loop: IngestLoop
        do {
            loop = try IngestLoop(settings: settings, listener: listener, spool: spool, rules: rules, logger: logger)
        } catch {
            try? listener.close()
            unlink(settings.socketPath)
            throw IngestStartError(description: "cannot start ingest: \(error)")
        }
        self.loop = loop
        self.wakeup = loop.epoll.wakeup
    }

    /// Runs the event loop on a thread of its own (it blocks in `epoll_wait`) until `stop`, and
    /// returns when it has ended. Once only. Cancelling it stops intake as `stop` does, with
    /// the default grace, without waiting here for the loop to end.
    package func run() async {
        let (loop, stopped, wakeup) = (self.loop, self.stopped, self.wakeup)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (ended: CheckedContinuation<Void, Never>) in
                startThread(named: "georelay-ingest") {
                    loop.run()
                    let waiters = stopped.list.withLock { waiters in
                        defer { waiters = nil }
                        return waiters ?? []
                    }
                    for waiter in waiters { waiter.resume() }
                    ended.resume()
                }
            }
        } onCancel: {
            loop.requestStop(graceMs: 5000)
            Epoll.wake(wakeup)
        }
    }

    /// Stops intake: closes the socket, answers what is in flight (within
    /// `grace`), then closes every connection; returns once `run`'s loop has ended.
    package func stop(grace: Duration = .seconds(5)) async {
        loop.requestStop(graceMs: Int64(grace.components.seconds * 1000))
        Epoll.wake(wakeup)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = stopped.list.withLock { waiters -> Bool in
                guard waiters != nil else { return true }
                waiters?.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }
}

extension IngestServer {
    /// Blocks the event-loop thread for `duration` at its next turn, as a wedged loop would be.
    ///
    /// - Important: A test hook (`GEORELAY_TEST_WEDGE`), never used otherwise: nothing is
    ///   read or answered meanwhile, and the heartbeat ages.
    package func stallForTesting(_ duration: Duration) {
        loop.stall(for: duration)
        Epoll.wake(wakeup)
    }

    /// Whether a relay is accepting connections on `socketPath`.
    package static func isRunning(socketPath: String) -> Bool {
        UnixListener.isLive(path: socketPath)
    }
}

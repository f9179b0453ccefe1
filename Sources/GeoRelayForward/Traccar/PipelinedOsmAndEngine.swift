import CCurl
import GeoRelayCore
import GeoRelaySpool
import Glibc

/// Sends rounds of OsmAnd requests pipelined on kept-alive connections (HTTP/1.1), on one thread.
///
/// libcurl no longer pipelines, so it only owns each connection (`CurlConnection`: DNS, TCP,
/// TLS and certificate checks) while the round (`PipelinedOsmAndRound`, a state machine without
/// I/O) frames the requests and settles the answers; this type is its driver: it opens and polls
/// the connections, moves bytes, and does what the round asks. A device's positions all go on
/// one connection, up to `window` requests ahead of their answers, which come back in order
/// (Traccar's OsmAnd port is a Netty HTTP codec without asynchronous handlers): a backlog costs
/// one round trip per window, not one per position. Up to `lanes` connections run at once, each
/// taking the next device when its own are all sent, so devices follow each other on a
/// connection without waiting for its answers.
final class PipelinedOsmAndEngine: TraccarEngine {
    private let url: String
    private let tls: Configuration.TLSSettings
    private let connectTimeoutSeconds: Double
    private let meter: WireMeter?
    private let wakeup: WakePipe
    private var setup: PipelinedOsmAndRound.Setup
    /// What the rounds carry from one to the next: each lane's connection state, what the server showed.
    private var carried: PipelinedOsmAndRound.Carried
    /// Each lane's connection, kept alive between rounds.
    private var connections: [CurlConnection?]

    func closeConnections() {
        for lane in connections.indices { connections[lane] = nil }
        for lane in carried.lanes.indices { carried.lanes[lane].close() }
        carried.limit.reset()
    }

    init(settings: Configuration.DestinationSettings, target: HTTP1Target, meter: WireMeter? = nil) throws {
        self.meter = meter
        url = settings.url
        tls = settings.tls
        connectTimeoutSeconds = settings.connectTimeoutSeconds
        setup = PipelinedOsmAndRound.Setup(
            destination: settings.name, traccar: TraccarProtocol(settings: settings),
            framing: TraccarProtocol.PipelinedFraming(target: target), window: settings.pipeline,
            requestTimeout: .milliseconds(Int(settings.requestTimeoutSeconds * 1000)), parkSeconds: 0,
            logger: .disabled)
        carried = PipelinedOsmAndRound.Carried(lanes: settings.concurrency, window: settings.pipeline)
        connections = Array(repeating: nil, count: settings.concurrency)
        wakeup = try WakePipe()
    }

    var wake: @Sendable () -> Void { wakeup.signal }

    func deliver(
        _ batches: [DeviceBatch], mode: DeliveryMode, ledger: inout DeliveryLedger, parkSeconds: Double,
        maxPositions: Int, stop: AbortFlag, yield: AbortFlag?, logger: Logger, progress: (DeliveryUpdate) -> Void
    ) -> [DeviceResult] {
        precondition(mode == .buffered, "the pipelined engine serves buffered destinations only")
        let clock = ContinuousClock()
        // A connection idle since the last round may have been closed by the server meanwhile.
        for (lane, connection) in connections.enumerated() {
            if let connection,
                (try? connection.wait(readable: true, writable: false, timeout: .zero))?.readable != false
            {
                connections[lane] = nil
            }
        }
        setup.parkSeconds = parkSeconds
        setup.logger = logger
        var round = PipelinedOsmAndRound(
            batches, setup: setup, carried: carried, connected: connections.map { $0 != nil },
            maxPositions: maxPositions, now: clock.now)
        defer { carried = round.carried }

        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { scratch.deallocate() }

        /// Does what the round asks, feeding back what came of it.
        func perform(_ actions: [PipelinedOsmAndRound.Action]) {
            for action in actions {
                switch action {
                case .connect(let lane):
                    do throws(CurlError) {
                        let connection = try CurlConnection(
                            url: url, tls: tls, connectTimeoutSeconds: connectTimeoutSeconds, meter: meter)
                        try connection.connect()
                        connections[lane] = connection
                        perform(round.handle(.connected(lane: lane), at: clock.now, ledger: &ledger))
                    } catch {
                        perform(round.handle(.connectFailed(lane: lane, error.message), at: clock.now, ledger: &ledger))
                    }
                case .send(let lane):
                    send(lane)
                case .close(let lane):
                    connections[lane] = nil
                case .progress(let update):
                    progress(update)
                }
            }
        }

        func send(_ lane: Int) {
            guard let connection = connections[lane] else { return }
            do throws(CurlError) {
                while round.lanes[lane].hasOutput {
                    let taken = try connection.send(round.lanes[lane].output, from: round.lanes[lane].sentBytes)
                    if taken == 0 { break }
                    perform(round.handle(.wrote(lane: lane, count: taken), at: clock.now, ledger: &ledger))
                }
            } catch {
                perform(round.handle(.broken(lane: lane, error.message), at: clock.now, ledger: &ledger))
            }
        }

        /// Reads what arrived; over TLS curl may hold decrypted bytes, so until it would block.
        func receive(_ lane: Int) {
            do throws(CurlError) {
                while let connection = connections[lane], let count = try connection.receive(into: scratch) {
                    let event: PipelinedOsmAndRound.Event =
                        count == 0
                        ? .peerClosed(lane: lane)
                        : .received(lane: lane, UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                    perform(round.handle(event, at: clock.now, ledger: &ledger))
                    if count == 0 { return }
                }
            } catch {
                perform(round.handle(.broken(lane: lane, error.message), at: clock.now, ledger: &ledger))
            }
        }

        var descriptors: [pollfd] = []
        while !stop.isSet {
            perform(round.handle(.turn(yield: yield?.isSet == true), at: clock.now, ledger: &ledger))
            let busy = round.busyLanes
            guard !busy.isEmpty, let deadline = round.deadline else { break }
            descriptors.removeAll(keepingCapacity: true)
            descriptors.append(pollfd(fd: wakeup.readEnd, events: Int16(POLLIN), revents: 0))
            var polled: [Int] = []
            for lane in busy {
                guard let connection = connections[lane] else { continue }
                polled.append(lane)
                descriptors.append(
                    pollfd(
                        fd: connection.descriptor,
                        events: Int16(POLLIN) | (round.lanes[lane].hasOutput ? Int16(POLLOUT) : 0), revents: 0))
            }
            // Computed in the call, so a poll interrupted by a signal waits only for what is left.
            var waitMs: Int32 { Int32(max(0, min(1000, Int(clock.now.duration(to: deadline) / .milliseconds(1)) + 1))) }
            do throws(SystemError) {
                try syscall("poll") { poll(&descriptors, nfds_t(descriptors.count), waitMs) }
            } catch {
                logger.error("\(error)")
                break
            }
            if descriptors[0].revents != 0 { wakeup.drain() }
            for (offset, lane) in polled.enumerated() where descriptors[offset + 1].revents != 0 {
                if descriptors[offset + 1].revents & Int16(POLLOUT) != 0 { send(lane) }
                receive(lane)
            }
            perform(round.handle(.tick, at: clock.now, ledger: &ledger))
        }
        if stop.isSet {
            // Abandoned: drop what is in flight; the spool still has it.
            perform(round.handle(.abandon, at: clock.now, ledger: &ledger))
        }
        perform(round.finish())
        return round.results
    }
}

@available(*, unavailable)
extension PipelinedOsmAndEngine: Sendable {}

import GeoRelayCore
import GeoRelaySpool
import Glibc

/// Sends rounds of positions to Traccar's Teltonika port, on one thread: codec 8 Extended
/// frames of up to 255 positions, one connection per device.
///
/// `TraccarForwarder` runs it as it runs the OsmAnd engines, so its modes (the buffered
/// backlog, alarms ahead of it, replays, real-time only), rotation over many devices, parking
/// and trials after a backoff are the same for both protocols; only the wire differs.
///
/// What a round sends and what each answer settles is `TeltonikaRound`'s, a state machine
/// without I/O (read its comment for the protocol's rules); this type is its driver: it opens,
/// checks and polls libcurl's connections, moves bytes, and does what the round asks.
final class TeltonikaEngine: TraccarEngine {
    private let endpoint: TeltonikaSession.Endpoint
    private let wakeup: WakePipe
    private var setup: TeltonikaRound.Setup
    /// What the rounds carry from one to the next: the link's depth, the connections kept open.
    private var carried: TeltonikaRound.Carried
    /// The sockets of the round's connections (`TeltonikaRound.Connection` holds their protocol).
    private var connections: [TeltonikaRound.ConnectionID: CurlConnection] = [:]
    /// Connections kept open between rounds at most: a round's worth of devices
    /// (`TraccarForwarder.devicesPerRound`); a fleet beyond that reconnects in turn.
    static let maxIdleConnections = 64

    init(settings: Configuration.DestinationSettings, meter: WireMeter? = nil) throws {
        endpoint = try TeltonikaSession.Endpoint(settings: settings, meter: meter)
        setup = TeltonikaRound.Setup(
            destination: settings.name, lanes: settings.concurrency,
            requestTimeout: .milliseconds(Int(settings.requestTimeoutSeconds * 1000)), buffered: true,
            parkSeconds: 0, logger: .disabled, maxIdle: Self.maxIdleConnections)
        carried = TeltonikaRound.Carried(pipeline: settings.pipeline)
        wakeup = try WakePipe()
    }

    var wake: @Sendable () -> Void { wakeup.signal }

    func closeConnections() {
        connections.removeAll()
        carried.connections.removeAll()
        carried.idle.removeAll()
        carried.depth.reset()
    }

    /// The frames a device's records go in: up to 255 records (the count is one byte) and at most
    /// `TeltonikaCodec.maxFrameBytes` (Traccar's frame decoder closes the connection on a longer
    /// one). Both are the protocol's own limits, taken whole: 255 positions of 30–45 bytes are 8 to
    /// 12 KiB, a fraction of a second on a satellite link, so a broken frame costs little to resend,
    /// and the bigger the frame, the fewer round trips a backlog costs (one per frame).
    static func frameEnd(_ records: ArraySlice<TeltonikaCodec.Record>, limit: Int) -> Int {
        records.startIndex
            + TeltonikaCodec.recordsFitting(records.prefix(min(limit, TeltonikaCodec.maxRecordsPerFrame)))
    }

    func deliver(
        _ batches: [DeviceBatch], mode: DeliveryMode, ledger: inout DeliveryLedger, parkSeconds: Double,
        maxPositions: Int, stop: AbortFlag, yield: AbortFlag?, logger: Logger, progress: (DeliveryUpdate) -> Void
    ) -> [DeviceResult] {
        let clock = ContinuousClock()
        setup.buffered = mode == .buffered
        setup.parkSeconds = parkSeconds
        setup.logger = logger
        var round = TeltonikaRound(batches, setup: setup, carried: carried, maxPositions: maxPositions, now: clock.now)
        defer { carried = round.carried }
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { scratch.deallocate() }

        /// Does what the round asks, feeding back what came of it.
        func perform(_ actions: [TeltonikaRound.Action]) {
            for action in actions {
                switch action {
                case .open(let id):
                    do throws(CurlError) {
                        let connection = try CurlConnection(
                            url: endpoint.curlURL, tls: endpoint.tls,
                            connectTimeoutSeconds: endpoint.connectTimeoutSeconds, meter: endpoint.meter)
                        try connection.connect()
                        connections[id] = connection
                        perform(round.handle(.opened(id), at: clock.now, ledger: &ledger))
                    } catch {
                        perform(round.handle(.openFailed(id, error.message), at: clock.now, ledger: &ledger))
                    }
                case .verify(let id):
                    // Closed by the server while idle, or holding bytes nobody asked for: not worth a frame.
                    let ready = try? connections[id]?.wait(readable: true, writable: false, timeout: .zero)
                    let fresh = ready.map { !$0.readable } ?? false
                    if !fresh { connections[id] = nil }
                    perform(round.handle(.verified(id, fresh: fresh), at: clock.now, ledger: &ledger))
                case .send(let id):
                    send(id)
                case .close(let id):
                    connections[id] = nil
                case .progress(let update):
                    progress(update)
                }
            }
        }

        func send(_ id: TeltonikaRound.ConnectionID) {
            guard let connection = connections[id] else { return }
            do throws(CurlError) {
                while let output = round.output(of: id), output.sent < output.bytes.count {
                    let taken = try connection.send(output.bytes, from: output.sent)
                    if taken == 0 { break }
                    perform(round.handle(.wrote(id, count: taken), at: clock.now, ledger: &ledger))
                }
            } catch {
                perform(round.handle(.failed(id, error.message), at: clock.now, ledger: &ledger))
            }
        }

        /// Reads what arrived; over TLS curl may hold decrypted bytes, so until it would block.
        func receive(_ id: TeltonikaRound.ConnectionID) {
            do throws(CurlError) {
                while let connection = connections[id], let count = try connection.receive(into: scratch) {
                    let event: TeltonikaRound.Event =
                        count == 0
                        ? .peerClosed(id) : .received(id, UnsafeRawBufferPointer(rebasing: scratch[..<count]))
                    perform(round.handle(event, at: clock.now, ledger: &ledger))
                    if count == 0 { return }
                }
            } catch {
                perform(round.handle(.failed(id, error.message), at: clock.now, ledger: &ledger))
            }
        }

        var descriptors: [pollfd] = []
        while !stop.isSet {
            perform(round.handle(.turn(yield: yield?.isSet == true), at: clock.now, ledger: &ledger))
            if round.isFinished { break }
            let polled = round.polled.filter { connections[$0.id] != nil }
            descriptors.removeAll(keepingCapacity: true)
            descriptors.append(pollfd(fd: wakeup.readEnd, events: Int16(POLLIN), revents: 0))
            for entry in polled {
                descriptors.append(
                    pollfd(
                        fd: connections[entry.id]!.descriptor,
                        events: Int16(POLLIN) | (entry.writing ? Int16(POLLOUT) : 0), revents: 0))
            }
            let deadline = round.deadline
            // Computed in the call, so a poll interrupted by a signal waits only for what is left.
            var waitMs: Int32 {
                Int32(
                    deadline.map { max(0, min(1000, Int(clock.now.duration(to: $0) / .milliseconds(1)) + 1)) }
                        ?? 1000)
            }
            do throws(SystemError) {
                try syscall("poll") { poll(&descriptors, nfds_t(descriptors.count), waitMs) }
            } catch {
                logger.error("\(error)")
                break
            }
            if descriptors[0].revents != 0 { wakeup.drain() }
            for (offset, entry) in polled.enumerated() where descriptors[offset + 1].revents != 0 {
                if descriptors[offset + 1].revents & Int16(POLLOUT) != 0 { send(entry.id) }
                receive(entry.id)
            }
            perform(round.handle(.tick, at: clock.now, ledger: &ledger))
        }
        // Shutdown abandons what is in flight (the spool still has it, and the forwarder says how
        // many went unanswered); a finished round keeps its connections.
        if stop.isSet { perform(round.handle(.stop, at: clock.now, ledger: &ledger)) }
        perform(round.finish())
        return round.results
    }
}

@available(*, unavailable)
extension TeltonikaEngine: Sendable {}

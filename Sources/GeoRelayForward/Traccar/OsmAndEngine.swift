import GeoRelayCore
import GeoRelaySpool

/// Sends rounds of OsmAnd requests pipelined on kept-alive connections (HTTP/1.1), on one thread:
/// `pipeline: 1` is a window of one, `buffer: false` a round that tries each position once.
///
/// libcurl no longer pipelines, so it only owns each connection (`CurlConnection`: DNS, TCP,
/// TLS and certificate checks) while the round (`OsmAndRound`, a state machine without
/// I/O) frames the requests and settles the answers; this type is its driver: it opens and polls
/// the connections, moves bytes, and does what the round asks. A device's positions all go on
/// one connection, up to `window` requests ahead of their answers, which come back in order
/// (Traccar's OsmAnd port is a Netty HTTP codec without asynchronous handlers): a backlog costs
/// one round trip per window, not one per position. Up to `lanes` connections run at once, each
/// taking the next device when its own are all sent, so devices follow each other on a
/// connection without waiting for its answers.
final class OsmAndEngine: TraccarEngine {
    private let driver: RoundDriver<Int>
    private var setup: OsmAndRound.Setup
    /// What the rounds carry from one to the next: each lane's connection state, what the server showed.
    private var carried: OsmAndRound.Carried

    func closeConnections() {
        driver.closeAll()
        for lane in carried.lanes.indices { carried.lanes[lane].close() }
        carried.limit.reset()
    }

    init(
        settings: Configuration.DestinationSettings, target: HTTP1Target, meter: WireMeter? = nil,
        logger: Logger = .disabled, spare: SpareConnection? = nil, network: (any RoundNetwork)? = nil,
        clock: any RelayClock = SystemClock()
    ) throws {
        driver = try RoundDriver(for: settings, meter: meter, spare: spare, network: network, clock: clock)
        setup = OsmAndRound.Setup(
            destination: settings.name, traccar: TraccarProtocol(settings: settings),
            framing: TraccarProtocol.PipelinedFraming(target: target), window: settings.pipeline,
            requestTimeout: settings.requestTimeout, parkSeconds: settings.parkSeconds,
            logger: logger)
        carried = OsmAndRound.Carried(lanes: settings.concurrency, window: settings.pipeline)
    }

    var wake: @Sendable () -> Void { driver.wake }

    func deliver(_ request: EngineRound, ledger: inout DeliveryLedger, progress: (DeliveryUpdate) -> Void)
        -> [DeviceResult]
    {
        // A connection idle since the last round may have been closed by the server meanwhile.
        let open = driver.keptOpen()
        var round = OsmAndRound(
            request.batches, setup: setup, carried: carried, connected: carried.lanes.indices.map(open.contains),
            maxPositions: request.maxPositions, mode: request.mode, now: driver.clock.now())
        driver.run(
            &round, ledger: &ledger, stop: request.stop, yield: request.yield, live: request.live, progress: progress)
        carried = round.carried
        return round.results
    }
}

@available(*, unavailable)
extension OsmAndEngine: Sendable {}

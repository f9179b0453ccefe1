import GeoRelayCore
import GeoRelaySpool

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
    private let driver: RoundDriver<TeltonikaRound.ConnectionID>
    private var setup: TeltonikaRound.Setup
    /// What the rounds carry from one to the next: the link's depth, the connections kept open.
    private var carried: TeltonikaRound.Carried
    /// Connections kept open between rounds at most: a round's worth of devices
    /// (`TraccarForwarder.devicesPerRound`); a fleet beyond that reconnects in turn.
    static let maxIdleConnections = 64

    init(
        settings: Configuration.DestinationSettings, meter: WireMeter? = nil, logger: Logger = .disabled,
        spare: SpareConnection? = nil, network: (any RoundNetwork)? = nil, clock: any RelayClock = SystemClock()
    ) throws {
        let endpoint = try TeltonikaSession.Endpoint(settings: settings, meter: meter)
        driver = RoundDriver(
            network: try network
                ?? CurlNetwork(
                    url: endpoint.curlURL, tls: endpoint.tls, connectTimeoutSeconds: endpoint.connectTimeoutSeconds,
                    meter: meter, spare: spare, clock: clock, concurrentHandshakes: true),
            clock: clock)
        setup = TeltonikaRound.Setup(
            destination: settings.name, lanes: settings.concurrency,
            requestTimeout: settings.requestTimeout, buffered: true,
            parkSeconds: settings.parkSeconds, logger: logger, maxIdle: Self.maxIdleConnections)
        carried = TeltonikaRound.Carried(pipeline: settings.pipeline)
    }

    var wake: @Sendable () -> Void { driver.wake }

    func closeConnections() {
        driver.closeAll()
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

    func deliver(_ request: EngineRound, ledger: inout DeliveryLedger, progress: (DeliveryUpdate) -> Void)
        -> [DeviceResult]
    {
        setup.buffered = request.mode == .buffered
        var round = TeltonikaRound(
            request.batches, setup: setup, carried: carried, maxPositions: request.maxPositions,
            now: driver.clock.now())
        driver.run(
            &round, ledger: &ledger, stop: request.stop, yield: request.yield, progress: progress)
        carried = round.carried
        return round.results
    }
}

@available(*, unavailable)
extension TeltonikaEngine: Sendable {}

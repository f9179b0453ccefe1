import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import Testing

@testable import GeoRelayForward

/// A spool and a destination in one process, on simulated time: Traccar over OsmAnd or Teltonika,
/// or the push gateway. The real forwarder, loop, rounds, probes, logins and spool, their
/// connections across a `SimulatedNetwork` to the fake server answering without a socket
/// (`SimulatedHTTPServer`, or the fake Teltonika port itself).
final class SimulatedForwardFixture: @unchecked Sendable {
    let world: SimulatedWorld
    let directory: TemporaryDirectory
    let spool: Spool
    var settings: Configuration.DestinationSettings
    let log = CapturedLog()
    let seed: SimulationSeed
    /// What Traccar stored over OsmAnd.
    let traccar: FakeOsmAndServer
    /// How it answers on the link (keep-alive, closes, its time over each request).
    let server: SimulatedHTTPServer
    /// Traccar's Teltonika port, the destination with `transport: .teltonika`.
    let teltonika: FakeTeltonikaServer
    /// The push gateway, the destination with `transport: .push` (its tokens on simulated time).
    let gateway: FakePushServer
    let connector: SimulatedConnector
    let transport: Transport

    enum Transport {
        case osmAnd
        case teltonika
        case push
    }

    /// - Parameters:
    ///   - processing: the server's time over each request (a slow one shows requests queueing
    ///     at it, which only a client that pipelines puts there).
    init(
        link: LinkProfile, seed: SimulationSeed, transport: Transport = .osmAnd, concurrency: Int = 4,
        pipeline: Int = Configuration.DestinationSettings().pipeline, closesAfterEachResponse: Bool = false,
        responsesPerConnection: Int? = nil,
        processing: ClosedRange<Duration> = .microseconds(200) ... .milliseconds(2),
        configure: (inout Configuration.DestinationSettings) -> Void = { _ in }
    ) async throws {
        world = SimulatedWorld(link: link)
        self.seed = seed
        let clock = world.clock
        self.transport = transport
        traccar = try FakeOsmAndServer(now: { clock.nowMs() })
        gateway = try FakePushServer(now: { clock.nowMs() })
        server = SimulatedHTTPServer(
            closesAfterEachResponse: closesAfterEachResponse, responsesPerConnection: responsesPerConnection,
            processing: processing, seed: seed.value
        ) { [traccar, gateway] in transport == .push ? gateway.answer($0) : traccar.answer($0) }
        teltonika = FakeTeltonikaServer(simulatedNow: { clock.nowMs() })
        directory = try TemporaryDirectory()
        var spoolSettings = Spool.Settings(path: directory.file("spool.db"))
        spoolSettings.stateInterval = .seconds(15)
        spoolSettings.clock = clock
        spool = try Spool(settings: spoolSettings)
        switch transport {
        case .osmAnd:
            settings = Configuration.DestinationSettings()
            settings.url = "http://traccar.invalid:5055/"
        case .teltonika:
            settings = Configuration.DestinationSettings()
            settings.url = "tcp://traccar.invalid:5027"
            settings.traccarProtocol = .teltonika
        case .push:
            settings = gateway.destination(base: "http://gateway.invalid")
            settings.push?.batchMaxDelaySeconds = 0
        }
        settings.concurrency = concurrency
        settings.pipeline = pipeline
        settings.useTestTimings()
        configure(&settings)
        connector = world.network.connector(
            to: transport == .teltonika ? teltonika : server,
            connectTimeout: .milliseconds(Int64(settings.connectTimeoutSeconds * 1000)),
            concurrentHandshakes: transport == .teltonika)
        try await spool.register(destinations: [
            DestinationRegistration(name: settings.name, buffered: settings.buffer)
        ])
    }

    /// Runs the forwarder while `body` runs, then lets it finish what is in flight.
    func withForwarder(gate: UplinkGate? = nil, _ body: () async throws -> Void) async throws {
        try await withForwarderLink(gate: gate) { _ in try await body() }
    }

    /// Runs the forwarder while `body` runs (given its link), then lets it finish what is in flight.
    /// - Parameter gate: the uplink's budget, when a test restricts it.
    func withForwarderLink(gate: UplinkGate? = nil, _ body: (DestinationLink) async throws -> Void) async throws {
        let (forwarder, link) = try makeForwarder(gate: gate)
        let ended = AbortFlag()
        world.watch(link, driver: connector, ended: ended)
        let task = Task {
            await forwarder.run()
            ended.set()
        }
        defer { task.cancel() }
        try await body(link)
        forwarder.finish()
        // What is in flight is answered within the request timeout; a wedge is abandoned, and fails.
        let finished = try await world.run(for: .seconds(120)) { ended.isSet }
        if !finished { forwarder.abandon() }
        await task.value
        if !finished { throw SimulatedWorldError("the forwarder did not finish within 120 s of simulated time") }
    }

    /// The destination's forwarder on the simulated link, and its link.
    private func makeForwarder(gate: UplinkGate?) throws -> (forwarder: any DestinationForwarder, link: DestinationLink)
    {
        let (settings, connector, clock) = (self.settings, self.connector, world.clock)
        let random = RandomSource(seed: seed.value)
        switch transport {
        case .push:
            let forwarder = try PushForwarder(
                settings: settings, spool: spool, logger: log.logger, gate: gate, now: nil, clock: clock,
                random: random,
                meter: WireMeter(), auth: connector.authTransport, network: connector,
                probe: connector.probe(url: settings.url), connect: connector.connectAttempt)
            return (forwarder, forwarder.link)
        case .osmAnd, .teltonika:
            let teltonika = transport == .teltonika
            let forwarder = try TraccarForwarder(
                settings: settings, spool: spool, logger: log.logger, gate: gate, clock: clock,
                probeMeter: WireMeter(),
                probe: teltonika ? connector.teltonikaProbe : connector.probe(url: settings.url),
                connect: connector.connectAttempt, random: random
            ) { meter, logger -> any TraccarEngine in
                teltonika
                    ? try TeltonikaEngine(
                        settings: settings, meter: meter, logger: logger, network: connector, clock: clock)
                    : try OsmAndEngine(
                        settings: settings, target: try HTTP1Target(url: settings.url), meter: meter, logger: logger,
                        network: connector, clock: clock)
            }
            return (forwarder, forwarder.link)
        }
    }

    /// What Traccar made of the positions it stored, over the fixture's transport (`TraccarModel`).
    func model() -> TraccarModel {
        settings.traccarProtocol == .teltonika ? teltonika.traccar() : traccar.traccar()
    }

    /// Moves simulated time until what Traccar stored satisfies `condition`, at most `limit`.
    /// - Returns: whether it held.
    func waitForArrivals(
        within limit: Duration = .seconds(600), _ condition: ([FakeOsmAndServer.Stored]) -> Bool
    ) async throws -> Bool {
        try await world.run(for: limit) { condition(traccar.positions) }
    }

    /// Moves simulated time until the destination's status satisfies `condition`, at most `limit`;
    /// a status that never does is a failure of the test (with its seed), and the last one read is
    /// returned.
    @discardableResult
    func waitForStatus(
        within limit: Duration = .seconds(600), sourceLocation: SourceLocation = #_sourceLocation,
        _ condition: (SpoolStatus.Destination) -> Bool
    ) async throws -> SpoolStatus.Destination {
        var status = try self.status()
        let held = try await world.run(for: limit) {
            await spool.flush()
            status = try self.status()
            return condition(status)
        }
        if !held {
            Issue.record(
                "the status waited for was not reached within \(limit) of simulated time: \(status.state), \(status.pending) pending, seed \(seed.value)\n\(log.tail())",
                sourceLocation: sourceLocation)
        }
        return status
    }

    /// The destination's status, read again only when the spool committed since the last read: the
    /// conditions tests wait for are all stored state, and a wait looks at every simulated step.
    func status() throws -> SpoolStatus.Destination {
        let reader = try self.reader ?? spool.makeReader()
        self.reader = reader
        let version = try reader.dataVersion()
        if let last = lastStatus, last.version == version { return last.status }
        let status = try reader.status().destinations.first { $0.name == settings.name }!
        lastStatus = (version, status)
        return status
    }
    /// The test's own connection to the spool, and what it read last.
    private var reader: SpoolReader?
    private var lastStatus: (version: Int64, status: SpoolStatus.Destination)?

    /// What a failed expectation says: the seed and how to replay it, and the forwarder's last words.
    func replay(_ test: String) -> String {
        "\(seed.replay(test)) on \(world.network.link)\n\(log.tail())"
    }

    deinit {
        reader = nil
        spool.close()
    }
}

import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// What pipelining adds to the Traccar destination: the servers that do not keep connections
/// alive, windows that break, and what goes on the wire, on a geostationary link (600 ms round
/// trips) on simulated time, from several seeds. The rest of the Traccar behaviour (order,
/// parking, quarantine, backoff, alarms) runs for both engines in `TraccarForwarderTests`.
@Suite(.offThePool) struct PipelinedOsmAndTests {
    static let seeds = SimulationSeed.all(3)
    /// A server that takes a while over each request, as Traccar writing to its database does:
    /// requests queue at it only when the client has them on the wire together.
    static let busy = Duration.milliseconds(20) ... .milliseconds(40)

    /// A backlog on a link with a round trip: one connection, many requests in flight on it.
    @Test(arguments: seeds)
    func aBacklogGoesAsWindowsOnOneConnection(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(
            link: .geo, seed: seed, concurrency: 1, pipeline: 16, processing: Self.busy)
        let run = "PipelinedOsmAndTests/aBacklogGoesAsWindowsOnOneConnection"
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 300))
            let status = try await f.waitForStatus { $0.pending == 0 }
            #expect(status.pending == 0, "\(f.replay(run))")
        }
        #expect(
            f.traccar.deliveryProblem("a", expected: track("a", count: 300).map(\.timeMs)) == nil, "\(f.replay(run))")
        #expect(f.server.connectionsAccepted == 1, "\(f.replay(run))")
        #expect(
            f.server.deepestPipeline >= 8, "requests in flight at once: \(f.server.deepestPipeline), \(f.replay(run))")
    }

    /// A server (or proxy) that closes after every answer gets one request per connection, and
    /// nothing is lost or repeated.
    @Test(arguments: seeds)
    func aServerThatClosesAfterEachAnswerGetsOneRequestAtATime(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(
            link: .geo, seed: seed, concurrency: 1, pipeline: 32, closesAfterEachResponse: true, processing: Self.busy)
        let run = "PipelinedOsmAndTests/aServerThatClosesAfterEachAnswerGetsOneRequestAtATime"
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 40))
            try await f.waitForStatus { $0.pending == 0 }
        }
        #expect(
            f.traccar.deliveryProblem("a", expected: track("a", count: 40).map(\.timeMs)) == nil, "\(f.replay(run))")
        #expect(f.server.deepestPipeline == 1, "\(f.replay(run))")
        #expect(f.server.connectionsAccepted == 40, "\(f.replay(run))")
    }

    /// A 503 for one request of a window while those behind it are taken (behind a link's round
    /// trip, so the window is deep): nothing is lost, the refused one goes again after the backoff,
    /// and those taken behind it do not cross the link twice.
    @Test(arguments: seeds)
    func aRequestRefusedInTheMiddleOfAWindowLosesNothingAndSendsNothingTwice(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(
            link: .geo, seed: seed, concurrency: 1, pipeline: 16, processing: Self.busy
        ) {
            $0.order = .currentFirst
        }
        let run = "PipelinedOsmAndTests/aRequestRefusedInTheMiddleOfAWindowLosesNothingAndSendsNothingTwice"
        // The current position ahead, two of the backlog, then a 503 with the window behind it.
        f.traccar.queueStatuses([nil, nil, nil, 503])
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 300))
            try await f.waitForStatus { $0.pending == 0 }
        }
        let positions = f.traccar.positions
        #expect(
            positions.count == 300,
            "Traccar got \(positions.count) positions for 300: \(positions.count - Set(positions.map(\.fixTimeMs)).count) twice, \(f.replay(run))"
        )
        let missing = Set(track("a", count: 300).map(\.timeMs)).subtracting(positions.map(\.fixTimeMs))
        #expect(
            missing.isEmpty,
            "missing \(missing.sorted().map { ($0 - track("a", count: 1)[0].timeMs) / 1000 }), \(f.replay(run))")
        #expect(
            f.server.deepestPipeline >= 4, "nothing was behind the 503: \(f.server.deepestPipeline), \(f.replay(run))")
        // The refused one arrives after newer history taken behind it (as it did when those were
        // sent twice): history, so it says so to Traccar.
        let retried = try #require(positions.first { $0.fixTimeMs == track("a", count: 3)[2].timeMs })
        #expect(
            retried.attributes["archive"] == .bool(true),
            "the refused one, sent again after newer ones: \(f.replay(run))")
    }

    /// Behind nginx, which closes a connection with `Connection: close` on its `keepalive_requests`th
    /// answer while more requests are pipelined behind it: those go again on a new connection,
    /// nothing repeats, and pipelining goes on (it is not a server that never keeps alive).
    @Test(arguments: seeds)
    func aConnectionClosedAfterItsRequestLimitGoesOnPipelinedOnANewOne(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(
            link: .geo, seed: seed, concurrency: 1, pipeline: 32, responsesPerConnection: 50, processing: Self.busy)
        let run = "PipelinedOsmAndTests/aConnectionClosedAfterItsRequestLimitGoesOnPipelinedOnANewOne"
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 400))
            try await f.waitForStatus { $0.pending == 0 }
        }
        #expect(
            f.traccar.deliveryProblem("a", expected: track("a", count: 400).map(\.timeMs)) == nil, "\(f.replay(run))")
        #expect(f.server.connectionsAccepted == 8, "\(f.replay(run))")
        #expect(f.server.deepestPipeline > 1, "\(f.replay(run))")
    }

    /// Bad payloads in the middle of windows: Traccar closes the connection on each; exactly those
    /// are quarantined, everything else arrives in order. The close comes with requests unread, so
    /// the connection is reset, which can take the answer before the bad one with it: that
    /// position is sent again (at-least-once), at most once per bad payload.
    @Test(arguments: seeds)
    func badPayloadsMidWindowAreQuarantinedAloneAndTheRestArrivesOnce(seed: SimulationSeed) async throws {
        let f = try await SimulatedForwardFixture(link: .geo, seed: seed, concurrency: 1, pipeline: 16)
        let run = "PipelinedOsmAndTests/badPayloadsMidWindowAreQuarantinedAloneAndTheRestArrivesOnce"
        var positions = track("a", count: 100)
        for index in [10, 11, 57] { positions[index].attributes = [Attribute("cell", .string("not-a-cell"))] }
        _ = await f.spool.append(positions)
        try await f.withForwarder {
            let status = try await f.waitForStatus { $0.pending == 0 && $0.quarantined == 3 }
            #expect(status.quarantined == 3, "\(f.replay(run))")
        }
        let expected = positions.indices.filter { ![10, 11, 57].contains($0) }.map { positions[$0].timeMs }
        let arrivals = f.traccar.firstArrivals
        #expect(arrivals.byDevice["a"]?.sorted() == expected, "\(f.replay(run))")
        #expect(f.traccar.orderProblem("a") == nil, "\(f.replay(run))")
        #expect(
            arrivals.duplicates <= 3, "\(arrivals.duplicates) positions repeated for 3 bad payloads, \(f.replay(run))")
    }

    /// The request a position becomes: a GET with the position in the query, decoded by the
    /// OsmAnd fake exactly as the form POST is, and small.
    @Test func aPipelinedRequestIsAQueryGetThatDecodesAsTheFormPost() throws {
        var settings = Configuration.DestinationSettings()
        settings.url = "http://traccar.example.org:5055/"
        let traccar = TraccarProtocol(settings: settings)
        let target = try HTTP1Target(url: settings.url)
        let position = Position(
            device: "gps-bow", timeMs: 1_784_953_800_000, lat: 59.912345, lon: 10.712345, speed: 5.1, course: 45.3,
            altitude: 12, accuracy: 4)
        var bytes: [UInt8] = []
        let framing = TraccarProtocol.PipelinedFraming(target: target)
        let count = framing.append(position, to: &bytes)
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(count == bytes.count)
        #expect(text.hasPrefix("GET /?id=gps-bow&timestamp=1784953800&lat=59.912345&lon=10.712345&speed="))
        #expect(text.hasSuffix(" HTTP/1.1\r\nHost: traccar.example.org:5055\r\n\r\n"))
        #expect(!text.contains("Content-"))
        let form = traccar.request(for: position)
        #expect(count < form.body.count + 100, "\(count) bytes")
        // A URL with a query of its own keeps it; the canary names no position.
        let keyed = TraccarProtocol.PipelinedFraming(
            target: try HTTP1Target(url: "http://traccar.example.org:5055/?key=k"))
        var keyedBytes: [UInt8] = []
        _ = keyed.append(position, to: &keyedBytes)
        #expect(String(decoding: keyedBytes, as: UTF8.self).hasPrefix("GET /?key=k&id=gps-bow&"))
        var canary: [UInt8] = []
        _ = framing.appendCanary(to: &canary)
        #expect(String(decoding: canary, as: UTF8.self) == "GET / HTTP/1.1\r\nHost: traccar.example.org:5055\r\n\r\n")
    }
}

@Suite(.offThePool) struct PipelineConfigurationTests {
    @Test func pipelineIsATraccarKeyWithADefaultAndBounds() throws {
        #expect(try Configuration.parse("{}").destinations[0].pipeline == 128)
        #expect(try Configuration.parse("{destinations: [{pipeline: 1}]}").destinations[0].pipeline == 1)
        for (text, message) in [
            ("{destinations: [{pipeline: 0}]}", "destinations[0].pipeline: must be at least 1, got 0"),
            ("{destinations: [{pipeline: 5000}]}", "destinations[0].pipeline: must be at most 1024, got 5000"),
        ] {
            #expect(throws: ConfigError.self) { try Configuration.parse(text) }
            do { _ = try Configuration.parse(text) } catch { #expect("\(error)".contains(message), "\(error)") }
        }
    }
}

import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// Push's round on the shared driver, on the simulated network, against servers of the styles in
/// the wild: one that keeps connections, one that closes after every answer, one with a keep-alive
/// limit, one that drops a batch's connection, one that never answers, and none at all. Each runs
/// on a geostationary link (600 ms round trips, 256 kbit/s) and on a LAN, from several seeds.
@Suite(.offThePool) struct PushRoundTests {
    /// An engine whose rounds send batches of one position each, body `batch <n>`, uncompressed.
    final class Harness {
        let engine: PushEngine
        let network: SimulatedNetwork
        let connector: SimulatedConnector
        var ledger = DeliveryLedger(destination: "push")
        var outcomes: [PushRound.Outcome] = []
        /// The most bytes each batch asked for might carry (nil: a full window's).
        var asked: [Int?] = []
        var connectionKeptAlive: Bool? { engine.keepsAlive }

        init(_ service: (any SimulatedService)?, link: LinkProfile, timeoutSeconds: Double = 10) throws {
            var settings = Configuration.DestinationSettings()
            settings.name = "push"
            settings.url = "http://gateway.invalid/push"
            settings.push = PushSettings()
            settings.requestTimeoutSeconds = timeoutSeconds
            settings.connectTimeoutSeconds = 5
            let clock = SimulatedClock(wallMs: 1_784_953_800_000)
            network = SimulatedNetwork(clock: clock, link: link)
            connector = network.connector(to: service, connectTimeout: .seconds(5))
            engine = try PushEngine(
                settings: settings,
                state: PushForwarder.DeliveryState(
                    encoding: .none, maxPositions: 500, planner: CompressionPlanner(fixedLevel: 3)),
                meter: nil, logger: .disabled, spare: nil, network: connector, clock: clock)
        }
        static func batch(_ n: Int) -> PushRound.Batch {
            let stored = DeliveryLedgerTests.stored(Int64(n + 1), second: Int64(n))
            return PushRound.Batch(
                items: [
                    PushForwarder.Item(
                        delivery: Delivery(stored: stored, ackThrough: stored.seq, stateAfter: FilterState()), point: []
                    )
                ],
                body: Array("batch \(n)".utf8), encoding: .none, full: true, ahead: false)
        }

        /// Sends batches `numbers`, a round at a time, each asking for the next while the link has
        /// room; rounds go on until every batch went or one stops.
        func send(_ numbers: Range<Int>, refill: PushRound.Refill = .window) {
            var next = numbers.lowerBound
            while next < numbers.upperBound {
                engine.begin(Self.batch(next), token: "t", ledger: ledger, refill: refill)
                next += 1
                while let need = engine.drive(stop: AbortFlag(), yield: AbortFlag(), progress: { _ in }) {
                    guard case .batch(let maxBytes) = need, next < numbers.upperBound else {
                        engine.supply(.none(stop: nil))
                        continue
                    }
                    asked.append(maxBytes)
                    engine.supply(.batch(Self.batch(next), token: "t"))
                    next += 1
                }
                let (outcome, after) = engine.end()
                ledger = after
                outcomes.append(outcome)
                if outcome.stop != nil { return }
            }
        }

        var delivered: Int { outcomes.reduce(0) { $0 + $1.delivered } }
    }

    static let links: [LinkProfile] = [.geo, .lan]
    /// A server's time over each request long enough for requests to queue behind it.
    static let deliberate = Duration.milliseconds(20) ... .milliseconds(50)
    static let runs = SimulationSeed.all().flatMap { seed in links.map { (seed, $0) } }

    static func echo(_ seen: SeenRequests? = nil) -> HTTPTestServer.Handler {
        { request in
            seen?.append(request)
            return HTTPTestResponse(status: 200, body: request.body)
        }
    }

    static func bodies(_ range: ClosedRange<Int>) -> [String] { range.map { "batch \($0)" } }

    @Test(arguments: runs)
    func batchesGoBackToBackOnOneConnectionAndSettleInOrder(seed: SimulationSeed, link: LinkProfile) throws {
        let seen = SeenRequests()
        // A server that takes a while over each request: a client that pipelines has its next
        // requests there before the answer to the first leaves.
        let server = SimulatedHTTPServer(processing: Self.deliberate, seed: seed.value, handler: Self.echo(seen))
        let h = try Harness(server, link: link)
        h.send(0..<8)
        let run = seed.replay("PushRoundTests/batchesGoBackToBackOnOneConnectionAndSettleInOrder") + " on \(link)"
        #expect(h.delivered == 8, "\(run)")
        #expect(h.outcomes.count == 1, "one round: \(run)")
        #expect(seen.bodies == Self.bodies(0...7), "\(run)")
        #expect(server.connectionsAccepted == 1, "\(run)")
        #expect(h.connectionKeptAlive == true, "\(run)")
        #expect(server.deepestPipeline >= 2, "batches behind one another: \(server.deepestPipeline), \(run)")
    }

    /// A trial has one small batch behind it on the wire before its answer (the gateway has both
    /// at once), then, answered, the window.
    @Test(arguments: runs)
    func aTrialHasOneSmallBatchBehindItThenTheWindow(seed: SimulationSeed, link: LinkProfile) throws {
        let seen = SeenRequests()
        let server = SimulatedHTTPServer(processing: Self.deliberate, seed: seed.value, handler: Self.echo(seen))
        let h = try Harness(server, link: link)
        let run = seed.replay("PushRoundTests/aTrialHasOneSmallBatchBehindItThenTheWindow") + " on \(link)"
        h.send(0..<1) // the gateway shows it keeps connections alive
        h.send(1..<6, refill: .trial(bytes: 100))
        #expect(h.delivered == 6, "\(run)")
        #expect(h.outcomes.count == 2, "the trial's round went on as a window: \(run)")
        #expect(h.asked.first == 100, "the batch behind the trial is a small one: \(h.asked), \(run)")
        #expect(h.asked.dropFirst().allSatisfy { $0 == nil }, "then the window's: \(h.asked), \(run)")
        #expect(seen.bodies == Self.bodies(0...5), "\(run)")
        #expect(server.deepestPipeline >= 2, "the trial and the batch behind it at once: \(run)")
    }

    /// A server that closes after every answer: each batch once, in order, one connection each,
    /// and nothing pipelined to it.
    @Test(arguments: runs)
    func aServerThatClosesAfterEachAnswerGetsEveryBatchOnceOneAtATime(seed: SimulationSeed, link: LinkProfile) throws {
        let seen = SeenRequests()
        let server = SimulatedHTTPServer(closesAfterEachResponse: true, seed: seed.value, handler: Self.echo(seen))
        let h = try Harness(server, link: link)
        let run =
            seed.replay("PushRoundTests/aServerThatClosesAfterEachAnswerGetsEveryBatchOnceOneAtATime") + " on \(link)"
        h.send(0..<5)
        #expect(h.delivered == 5, "\(run)")
        #expect(seen.bodies == Self.bodies(0...4), "each handled once, in order: \(run)")
        #expect(h.connectionKeptAlive == false, "\(run)")
        #expect(server.connectionsAccepted == 5, "\(run)")
        #expect(server.deepestPipeline == 1, "\(run)")
    }

    /// nginx's keep-alive limit: a new connection every few answers, still pipelined.
    @Test(arguments: runs)
    func aKeepAliveLimitOnlyOpensANewConnection(seed: SimulationSeed, link: LinkProfile) throws {
        let seen = SeenRequests()
        let server = SimulatedHTTPServer(responsesPerConnection: 3, seed: seed.value, handler: Self.echo(seen))
        let h = try Harness(server, link: link)
        let run = seed.replay("PushRoundTests/aKeepAliveLimitOnlyOpensANewConnection") + " on \(link)"
        h.send(0..<9)
        #expect(h.delivered == 9, "\(run)")
        #expect(seen.bodies == Self.bodies(0...8), "\(run)")
        #expect(h.connectionKeptAlive == true, "\(run)")
        #expect(server.connectionsAccepted == 3, "\(run)")
    }

    /// A kept-alive connection the server closed while idle (its restart here): the next round
    /// goes on a new connection, still pipelined (an idle close says nothing of pipelines).
    @Test(arguments: runs)
    func anIdleConnectionTheServerClosedIsReplacedAndStillPipelines(seed: SimulationSeed, link: LinkProfile) throws {
        let seen = SeenRequests()
        let server = SimulatedHTTPServer(seed: seed.value, handler: Self.echo(seen))
        let h = try Harness(server, link: link)
        let run =
            seed.replay("PushRoundTests/anIdleConnectionTheServerClosedIsReplacedAndStillPipelines") + " on \(link)"
        h.send(0..<1)
        h.connector.closeServerConnections()
        h.network.advance(by: .seconds(5))
        h.send(1..<4)
        #expect(h.delivered == 4, "\(run)")
        #expect(h.connectionKeptAlive == true, "\(run)")
        #expect(server.connectionsAccepted == 2, "\(run)")
        #expect(seen.bodies == Self.bodies(0...3), "each once: \(run)")
    }

    /// A batch whose connection the server drops, every time: it fails after going twice; the
    /// batch before it is settled, the rest goes again next round.
    @Test(arguments: runs)
    func aBatchTheServerDropsTwiceFailsAndTheRestGoesAgain(seed: SimulationSeed, link: LinkProfile) throws {
        let seen = SeenRequests()
        let server = SimulatedHTTPServer(seed: seed.value) { request in
            seen.append(request)
            return String(decoding: request.body, as: UTF8.self) == "batch 1"
                ? nil : HTTPTestResponse(status: 200, body: request.body)
        }
        let h = try Harness(server, link: link)
        let run = seed.replay("PushRoundTests/aBatchTheServerDropsTwiceFailsAndTheRestGoesAgain") + " on \(link)"
        h.send(0..<4)
        #expect(
            h.outcomes.last?.stop.map { "\($0)" }?.contains("twice without answering") == true, "\(h.outcomes), \(run)")
        #expect(seen.bodies.filter { $0 == "batch 1" }.count == 2, "the dropped batch went twice, no more: \(run)")
        #expect(seen.bodies.first == "batch 0", "\(run)")
        #expect(h.delivered == 1, "batch 0 settled: \(run)")
    }

    /// Nothing comes back: the round ends at the timeout, as the link's failure.
    @Test(arguments: [LinkProfile.geo, .lan])
    func noAnswerEndsAtTheTimeout(link: LinkProfile) throws {
        let h = try Harness(SimulatedBlackHole(), link: link, timeoutSeconds: 1)
        let started = h.network.clock.now()
        h.send(0..<2)
        #expect(h.delivered == 0)
        guard case .unavailable(let reason, _, let transport)? = h.outcomes.last?.stop else {
            Issue.record("no failure: \(h.outcomes)")
            return
        }
        #expect(reason.contains("no answer in 1 s"), "\(reason)")
        #expect(transport)
        // The handshake, then a second of silence, not more.
        let took = started.duration(to: h.network.clock.now())
        #expect(took >= .seconds(1) && took < .seconds(1) + link.roundTrip * 2, "\(took)")
    }

    /// Nothing listens: a failure of the link, after the refusal's round trip.
    @Test(arguments: [LinkProfile.geo, .lan])
    func aRefusedConnectionFails(link: LinkProfile) throws {
        let h = try Harness(nil, link: link)
        h.send(0..<1)
        guard case .unavailable(_, _, let transport)? = h.outcomes.last?.stop else {
            Issue.record("a connection to a closed port answered: \(h.outcomes)")
            return
        }
        #expect(transport)
        #expect(h.delivered == 0)
        #expect(h.network.counters.refused == 1)
    }
}

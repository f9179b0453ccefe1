import Dispatch
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// Push's round on the shared driver, against servers of the styles in the wild: one that keeps
/// connections, one that closes after every answer, one with a keep-alive limit, one that drops a
/// batch's connection, one that never answers, and none at all.
@Suite(.offThePool) struct PushRoundTests {
    /// An engine whose rounds send batches of one position each, body `batch <n>`, uncompressed.
    final class Harness {
        let engine: PushEngine
        var ledger = DeliveryLedger(destination: "push")
        var outcomes: [PushRound.Outcome] = []
        /// The most bytes each batch asked for might carry (nil: a full window's).
        var asked: [Int?] = []
        var connectionKeptAlive: Bool? { engine.keepsAlive }

        init(url: String, timeoutSeconds: Double = 10) throws {
            var settings = Configuration.DestinationSettings()
            settings.name = "push"
            settings.url = url + "/push"
            settings.push = PushSettings()
            settings.requestTimeoutSeconds = timeoutSeconds
            settings.connectTimeoutSeconds = 5
            engine = try PushEngine(
                settings: settings,
                state: PushForwarder.DeliveryState(
                    encoding: .none, maxPositions: 500, planner: CompressionPlanner(fixedLevel: 3)),
                meter: nil, logger: .disabled, spare: nil, clock: SystemClock())
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

    static func echo(_ seen: SeenRequests? = nil) -> HTTPTestServer.Handler {
        { request in
            seen?.append(request)
            return HTTPTestResponse(status: 200, body: request.body)
        }
    }

    static func bodies(_ range: ClosedRange<Int>) -> [String] { range.map { "batch \($0)" } }

    @Test func batchesGoBackToBackOnOneConnectionAndSettleInOrder() throws {
        let seen = SeenRequests()
        // A server that reads ahead: its deepest pipeline shows what the client kept on the wire.
        let server = try HTTPTestServer(readsAhead: .milliseconds(200), handler: Self.echo(seen))
        defer { server.stop() }
        let h = try Harness(url: server.url)
        h.send(0..<8)
        #expect(h.delivered == 8)
        #expect(h.outcomes.count == 1, "one round")
        #expect(seen.bodies == Self.bodies(0...7))
        #expect(server.connectionsAccepted == 1)
        #expect(server.deepestPipeline >= 2, "batches waiting behind one another: \(server.deepestPipeline)")
        #expect(h.connectionKeptAlive == true)
    }

    /// A trial has one small batch behind it on the wire before its answer (the gateway has both
    /// at once), then, answered, the window.
    @Test func aTrialHasOneSmallBatchBehindItThenTheWindow() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer(readsAhead: .milliseconds(200), handler: Self.echo(seen))
        defer { server.stop() }
        let h = try Harness(url: server.url)
        h.send(0..<1) // the gateway shows it keeps connections alive
        h.send(1..<6, refill: .trial(bytes: 100))
        #expect(h.delivered == 6)
        #expect(h.outcomes.count == 2, "the trial's round went on as a window")
        #expect(h.asked.first == 100, "the batch behind the trial is a small one: \(h.asked)")
        #expect(h.asked.dropFirst().allSatisfy { $0 == nil }, "then the window's: \(h.asked)")
        #expect(server.deepestPipeline >= 2, "the trial and the batch behind it at once: \(server.deepestPipeline)")
        #expect(seen.bodies == Self.bodies(0...5))
    }

    /// A server that closes after every answer: each batch once, in order, one connection each,
    /// and nothing pipelined to it.
    @Test func aServerThatClosesAfterEachAnswerGetsEveryBatchOnceOneAtATime() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer(closesAfterEachResponse: true, handler: Self.echo(seen))
        defer { server.stop() }
        let h = try Harness(url: server.url)
        h.send(0..<5)
        #expect(h.delivered == 5)
        #expect(seen.bodies == Self.bodies(0...4), "each handled once, in order")
        #expect(h.connectionKeptAlive == false)
        #expect(server.connectionsAccepted == 5)
    }

    /// nginx's keep-alive limit: a new connection every few answers, still pipelined.
    @Test func aKeepAliveLimitOnlyOpensANewConnection() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer(responsesPerConnection: 3, handler: Self.echo(seen))
        defer { server.stop() }
        let h = try Harness(url: server.url)
        h.send(0..<9)
        #expect(h.delivered == 9)
        #expect(seen.bodies == Self.bodies(0...8))
        #expect(h.connectionKeptAlive == true)
        #expect(server.connectionsAccepted == 3)
    }

    /// A kept-alive connection the server closed while idle (its restart here): the next round
    /// goes on a new connection, still pipelined (an idle close says nothing of pipelines).
    @Test func anIdleConnectionTheServerClosedIsReplacedAndStillPipelines() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer(handler: Self.echo(seen))
        defer { server.stop() }
        let h = try Harness(url: server.url)
        h.send(0..<1)
        let port = server.port
        server.stop()
        try server.start(port: port)
        h.send(1..<4)
        #expect(h.delivered == 4)
        #expect(h.connectionKeptAlive == true)
        #expect(seen.bodies == Self.bodies(0...3), "each once")
    }

    /// A batch whose connection the server drops, every time: it fails after going twice; the
    /// batch before it is settled, the rest goes again next round.
    @Test func aBatchTheServerDropsTwiceFailsAndTheRestGoesAgain() throws {
        let seen = SeenRequests()
        let server = try HTTPTestServer { request in
            seen.append(request)
            return String(decoding: request.body, as: UTF8.self) == "batch 1"
                ? nil : HTTPTestResponse(status: 200, body: request.body)
        }
        defer { server.stop() }
        let h = try Harness(url: server.url)
        h.send(0..<4)
        #expect(h.outcomes.last?.stop.map { "\($0)" }?.contains("twice without answering") == true, "\(h.outcomes)")
        #expect(seen.bodies.filter { $0 == "batch 1" }.count == 2, "the dropped batch went twice, no more")
        #expect(seen.bodies.first == "batch 0")
    }

    /// Nothing comes back: the round ends at the timeout, as the link's failure.
    @Test func noAnswerEndsAtTheTimeout() throws {
        let release = DispatchSemaphore(value: 0)
        let server = try HTTPTestServer { _ in
            _ = release.wait(timeout: .now() + 30)
            return HTTPTestResponse(status: 200)
        }
        defer {
            release.signal()
            server.stop()
        }
        let h = try Harness(url: server.url, timeoutSeconds: 1)
        h.send(0..<2)
        #expect(h.delivered == 0)
        guard case .unavailable(let reason, _, let transport)? = h.outcomes.last?.stop else {
            Issue.record("no failure: \(h.outcomes)")
            return
        }
        #expect(reason.contains("no answer in 1 s"), "\(reason)")
        #expect(transport)
    }

    /// Nothing listens: a failure of the link, at once.
    @Test func aRefusedConnectionFails() throws {
        let server = try HTTPTestServer(handler: Self.echo())
        let url = server.url
        server.stop()
        let h = try Harness(url: url)
        h.send(0..<1)
        guard case .unavailable(_, _, let transport)? = h.outcomes.last?.stop else {
            Issue.record("a connection to a closed port answered: \(h.outcomes)")
            return
        }
        #expect(transport)
        #expect(h.delivered == 0)
    }
}

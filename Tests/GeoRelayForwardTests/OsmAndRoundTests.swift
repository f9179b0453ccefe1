import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The pipelined OsmAnd round as a state machine: what it asks for and what it settles, driven
/// event by event and byte by byte, without a socket.
@Suite(.offThePool) struct OsmAndRoundTests {
    typealias Round = OsmAndRound

    /// A round of device 1's four positions (seqs 11–14) on one lane, window 4.
    struct Harness {
        var round: Round
        var ledger = DeliveryLedger(destination: "traccar")
        var now = RelayInstant(sinceOrigin: .seconds(1_000))
        var progress: [DeliveryUpdate] = []
        static let timeout: Duration = .seconds(30)

        init(keepsAlive: Bool? = true, lanes: Int = 1, unproven: Int? = nil) throws {
            var settings = Configuration.DestinationSettings()
            settings.url = "http://traccar.example:5055/"
            let setup = Round.Setup(
                destination: "traccar", traccar: TraccarProtocol(settings: settings),
                framing: TraccarProtocol.PipelinedFraming(target: try HTTP1Target(url: settings.url)), window: 4,
                requestTimeout: Self.timeout, parkSeconds: 600, logger: .disabled)
            var carried = Round.Carried(lanes: lanes, window: 4)
            carried.keepsAlive = keepsAlive
            var batch = SettlementTests.batch(parked: false)
            batch.unproven = unproven
            round = Round(
                Array(repeating: batch, count: lanes), setup: setup, carried: carried,
                connected: Array(repeating: false, count: lanes), maxPositions: 100, now: now)
        }

        /// Handles an event; progress is kept, the other actions returned in order.
        mutating func handle(_ event: Round.Event) -> [String] {
            round.handle(event, at: now, ledger: &ledger).described(progress: &progress)
        }

        /// The round's first turn on lane 0: its connection opened and the window written.
        mutating func sendWindow() {
            _ = handle(.turn(yield: false))
            _ = handle(.opened(0))
            _ = wroteAll()
        }

        /// Says the socket took all of lane 0's output.
        mutating func wroteAll() -> [String] {
            handle(.wrote(0, count: round.lanes[0].output.count - round.lanes[0].sentBytes))
        }

        /// Feeds `text` one byte at a time, each as its own read.
        mutating func receive(_ text: String, onByte: (Harness) -> Void = { _ in }) -> [String] {
            receive(Array(text.utf8), onByte: onByte)
        }

        mutating func receive(_ bytes: [UInt8], onByte: (Harness) -> Void = { _ in }) -> [String] {
            var actions: [String] = []
            for byte in bytes {
                actions += [byte].withUnsafeBytes { handle(.received(0, $0)) }
                onByte(self)
            }
            return actions
        }

        mutating func finish() {
            for case .progress(let update) in round.finish() { progress.append(update) }
        }

        var acknowledged: [Int64] { progress.flatMap(\.acknowledged).map(\.seq) }
        var requestsOnTheWire: Int {
            String(decoding: round.lanes[0].output, as: UTF8.self).components(separatedBy: " HTTP/1.1\r\n").count - 1
        }
    }

    static let ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

    @Test func aWindowGoesOutAtOnceAndEachAnswerSettlesOnItsLastByte() throws {
        var h = try Harness()
        #expect(h.handle(.turn(yield: false)) == ["open 0"], "a connection first, nothing framed before it")
        #expect(h.round.lanes[0].output.isEmpty)
        #expect(h.handle(.opened(0)) == ["send 0"])
        #expect(!h.round.isFinished, "the request the new connection carries keeps the round going")
        #expect(h.requestsOnTheWire == 4, "the whole window, back to back")
        #expect(h.wroteAll().isEmpty)
        var settledEarly = false
        let answer = Array(Self.ok.utf8)
        _ = h.receive(Array(answer.dropLast())) { settledEarly = settledEarly || $0.round.results[0].delivered > 0 }
        #expect(!settledEarly, "nothing settled before the answer's last byte")
        _ = h.receive([answer.last!])
        #expect(h.round.results[0].delivered == 1)
        _ = h.receive(Self.ok + Self.ok + Self.ok)
        #expect(h.round.results[0].delivered == 4)
        #expect(h.round.busyLanes.isEmpty, "nothing in flight, nothing unsent: the round is over")
        #expect(h.handle(.turn(yield: false)).isEmpty)
        h.finish()
        #expect(h.acknowledged.max() == 14)
        #expect(
            h.progress.last?.sent ?? 0 > 0,
            "the hand-over says what it delivered (the recorder shows the destination online)")
    }

    @Test func aServerNotYetShownToKeepConnectionsGetsOneRequestThenTheWindow() throws {
        var h = try Harness(keepsAlive: nil)
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        #expect(h.requestsOnTheWire == 1)
        _ = h.wroteAll()
        _ = h.receive(Self.ok)
        #expect(h.round.carried.keepsAlive == true)
        #expect(h.handle(.turn(yield: false)) == ["send 0"])
        #expect(h.requestsOnTheWire == 3, "the rest of the device's positions in one window")
    }

    @Test func anAnswerThatClosesTheConnectionSendsWhatWasBehindItAgain() throws {
        var h = try Harness()
        h.sendWindow()
        let closing = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        #expect(h.receive(closing) == ["close 0"])
        #expect(h.round.results[0].delivered == 1)
        #expect(h.round.carried.keepsAlive == false)
        #expect(h.handle(.turn(yield: false)) == ["open 0"], "the three unread requests go again")
        _ = h.handle(.opened(0))
        #expect(h.requestsOnTheWire == 1, "one at a time to a server that closes")
        #expect(h.round.lanes[0].inFlight.first?.index == 1)
    }

    @Test func aConnectionClosedMidWindowMakesTheFirstUnansweredTheSuspectAlone() throws {
        var h = try Harness()
        h.sendWindow()
        _ = h.receive(Self.ok)
        #expect(h.handle(.peerClosed(0)) == ["close 0"])
        #expect(h.handle(.turn(yield: false)) == ["open 0"])
        _ = h.handle(.opened(0))
        #expect(h.round.lanes[0].inFlight.map(\.index) == [1], "the suspect, alone")
        #expect(h.round.lanes[0].inFlight.first?.attempt == .retry)
        _ = h.wroteAll()
        // No answer again: the canary (an empty request) decides between the payload and the link.
        _ = h.handle(.peerClosed(0))
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        #expect(h.round.lanes[0].inFlight.first?.attempt == .canary)
        #expect(
            !String(decoding: h.round.lanes[0].output, as: UTF8.self).contains("lat="), "the canary has no position")
        _ = h.wroteAll()
        _ = h.receive(Self.ok)
        // The server answers an empty request: the payload was what it could not take.
        #expect(h.handle(.turn(yield: false)) == ["send 0"], "the rest goes on, pipelined again")
        #expect(h.round.lanes[0].inFlight.map(\.index) == [2, 3])
        h.finish()
        #expect(h.progress.flatMap(\.quarantined).map(\.seq) == [12])
    }

    /// A device the server has not shown it knows: one request on the wire until it is taken,
    /// then the rest of the batch in the same round (not a round, and a round trip, later).
    @Test func aDeviceNotYetKnownSendsAFewUntilOneIsTakenThenTheRest() throws {
        var h = try Harness(unproven: 1)
        h.sendWindow()
        #expect(h.round.lanes[0].inFlight.count == 1, "one request before the server has taken one")
        _ = h.receive(Self.ok)
        #expect(h.round.results[0].delivered == 1)
        _ = h.handle(.turn(yield: false))
        _ = h.wroteAll()
        #expect(h.round.lanes[0].inFlight.count == 3, "the rest of the batch, in this round")
        var unknown = try Harness(unproven: 1)
        unknown.sendWindow()
        _ = unknown.receive("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        _ = unknown.handle(.turn(yield: false))
        #expect(unknown.round.results[0].attempted == 1, "a device the server does not know cost one request")
    }

    @Test func anUnknownDeviceStopsItsWindowAndTheAnswersBehindItSettleNothing() throws {
        var h = try Harness()
        h.sendWindow()
        _ = h.receive("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n" + Self.ok + Self.ok + Self.ok)
        #expect(h.round.results[0].delivered == 0, "a later 200 must not move the cursor past the refused one")
        #expect(h.round.busyLanes.isEmpty)
        #expect(h.handle(.turn(yield: false)).isEmpty, "the device waits for its park")
        h.finish()
        #expect(h.acknowledged.isEmpty)
        #expect(h.progress.flatMap(\.parked).count == 1)
    }

    /// A 503 for the first of the window and 200s behind it: the server has those three, but the
    /// cursor cannot pass the first, which goes again; they settle out of turn, not sent again.
    @Test func behindAServerUnavailableForOneRequestThe200sSettleOutOfTurn() throws {
        var h = try Harness()
        h.sendWindow()
        _ = h.receive("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n" + Self.ok + Self.ok + Self.ok)
        #expect(h.round.results[0].delivered == 0, "a later 200 must not move the cursor past the one refused for now")
        #expect(h.round.results[0].unavailable != nil)
        h.finish()
        #expect(h.acknowledged.isEmpty)
        #expect(h.progress.flatMap(\.sentAhead) == [12, 13, 14], "the three taken behind it, out of turn")
        #expect(h.progress.reduce(0) { $0 + $1.sent } == 3)
        #expect(h.ledger.sentAhead == [12, 13, 14], "the next round skips them")
    }

    @Test func anAnswerToNoRequestBreaksTheConnectionAndIsNoAcknowledgement() throws {
        var h = try Harness(keepsAlive: nil)
        h.sendWindow()
        #expect(h.receive(Self.ok + Self.ok) == ["close 0"])
        #expect(h.round.results[0].delivered == 1, "only the one request asked for is settled")
        #expect(h.round.results[0].unavailable == nil, "nothing was unanswered: the round goes on")
        #expect(h.handle(.turn(yield: false)) == ["open 0"])
    }

    @Test func bytesThatAreNoResponseBreakTheConnectionAndFailTheRound() throws {
        var h = try Harness()
        h.sendWindow()
        #expect(h.receive("SSH-2.0-OpenSSH_9.6\r\n") == ["close 0"])
        #expect(h.round.results[0].delivered == 0)
        #expect(h.round.results[0].unavailable != nil)
        #expect(h.handle(.turn(yield: false)).isEmpty)
    }

    @Test func silenceForTheRequestTimeoutFailsTheRound() throws {
        var h = try Harness()
        h.sendWindow()
        h.now += Harness.timeout - .milliseconds(1)
        #expect(h.handle(.tick).isEmpty)
        h.now += .milliseconds(1)
        #expect(h.handle(.tick) == ["close 0"])
        #expect(h.round.results[0].unavailable != nil)
        #expect(h.handle(.turn(yield: false)).isEmpty, "nothing more this round")
    }

    /// Opening blocks the driver for up to the connect timeout: a second lane's connection is
    /// asked for only once the first opened, and not at all once the first failed.
    @Test func connectionsAreAskedForOneAtATimeAndNotAfterOneFailed() throws {
        var h = try Harness(lanes: 2)
        #expect(h.handle(.turn(yield: false)) == ["open 0"])
        #expect(h.handle(.opened(0)) == ["send 0", "open 1"])
        var failed = try Harness(lanes: 2)
        _ = failed.handle(.turn(yield: false))
        #expect(failed.handle(.openFailed(0, "Connection timed out")).isEmpty, "the round ends at the first failure")
        #expect(failed.handle(.turn(yield: false)).isEmpty)
        #expect(failed.round.results.map { $0.unavailable != nil } == [true, false])
    }

    @Test func aConnectionThatCannotBeOpenedFailsTheDevicesBatch() throws {
        var h = try Harness()
        _ = h.handle(.turn(yield: false))
        #expect(h.handle(.openFailed(0, "Could not resolve host")).isEmpty)
        #expect(h.round.results[0].unavailable != nil)
        #expect(h.round.results[0].attempted == 0)
        #expect(h.handle(.turn(yield: false)).isEmpty)
    }

    @Test func aYieldLetsWhatIsInFlightFinishAndStartsNothingNew() throws {
        var h = try Harness(keepsAlive: nil)
        h.sendWindow()
        #expect(h.handle(.turn(yield: true)).isEmpty)
        _ = h.receive(Self.ok)
        #expect(h.handle(.turn(yield: true)).isEmpty)
        #expect(h.round.busyLanes.isEmpty)
        #expect(h.round.results[0].attempted == 1)
    }

    @Test func aStoppedRoundAbandonsWhatWasInFlight() throws {
        var h = try Harness()
        h.sendWindow()
        _ = h.receive(Self.ok)
        #expect(h.handle(.stop).isEmpty)
        let closed = h.round.finish().compactMap { if case .close(let lane) = $0 { lane } else { nil } }
        #expect(closed == [0])
        #expect(h.round.results[0].abandoned == 3)
        #expect(h.round.results[0].delivered == 1)
    }

    // MARK: - Live fixes joining a round of history (issue 36 §2)

    /// The requests framed on lane 0 since the last call, as their query lines.
    static func requests(_ h: Harness) -> [String] {
        String(decoding: h.round.lanes[0].output, as: UTF8.self).components(separatedBy: "\r\n")
            .filter { $0.hasSuffix(" HTTP/1.1") }
    }

    @Test func aLiveFixGoesNextOnItsDevicesLaneAndWhatFollowsItIsHistory() throws {
        var h = try Harness(keepsAlive: nil)
        h.sendWindow()
        _ = h.receive(Self.ok)
        // Device 1 is known now; its newest (seq 20, a minute on) commits while 12–14 wait.
        let live = DeliveryLedgerTests.stored(20, second: 80)
        _ = h.handle(.joined([live]))
        #expect(h.handle(.turn(yield: false)) == ["send 0"])
        let sent = Self.requests(h)
        #expect(sent.count == 4, "the live fix and the rest of the window")
        #expect(sent.first?.contains("timestamp=1784953880") == true, "the live fix first: \(sent)")
        #expect(sent.dropFirst().allSatisfy { $0.contains("archive=true") }, "12–14 are history to the server now")
        #expect(!sent[0].contains("archive"))
        _ = h.wroteAll()
        _ = h.receive(Self.ok + Self.ok + Self.ok + Self.ok)
        h.finish()
        #expect(h.acknowledged.max() == 14)
        #expect(h.progress.flatMap(\.sentAhead) == [20], "settled as sent ahead: the backlog skips it")
        #expect(
            h.ledger.filters[1]?.newestSentMs == live.position.timeMs,
            "settling the history behind it does not take the server's newest back")
    }

    @Test func aLiveFixTheRoundCarriesOrTheServerHasIsNotSentTwice() throws {
        var h = try Harness(keepsAlive: nil)
        h.sendWindow()
        _ = h.receive(Self.ok)
        _ = h.handle(.joined([DeliveryLedgerTests.stored(14, second: 14)]))
        _ = h.handle(.turn(yield: false))
        #expect(Self.requests(h).count == 3, "14 is the batch's own: it goes in its turn, once")
        let live = DeliveryLedgerTests.stored(20, second: 80)
        _ = h.handle(.joined([live]))
        _ = h.handle(.joined([live]))
        _ = h.wroteAll()
        // The window refills once a batch's worth of places is free (`InFlightLimit.room`).
        _ = h.receive(Self.ok + Self.ok + Self.ok)
        _ = h.handle(.turn(yield: false))
        #expect(Self.requests(h).count == 1, "the live fix once, however often it is posted")
    }

    @Test func aDeviceTheServerHasNotShownItKnowsJoinsNothing() throws {
        var h = try Harness(keepsAlive: nil)
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.joined([DeliveryLedgerTests.stored(20, second: 80)]))
        _ = h.handle(.opened(0))
        #expect(Self.requests(h).count == 1)
        #expect(!Self.requests(h)[0].contains("timestamp=1784953880"), "the round's own first: \(Self.requests(h))")
    }

    @Test func aLiveFixOfADeviceNotInTheRoundGoesOnAFreeLane() throws {
        var h = try Harness(keepsAlive: nil)
        h.sendWindow()
        _ = h.receive(Self.ok)
        // Device 2 was taken before (a ledger that knows it), with nothing pending when the round began.
        var update = DeliveryUpdate(destination: "traccar")
        h.ledger.delivered(
            Delivery(
                stored: DeliveryLedgerTests.stored(5, device: 2, second: 5), ackThrough: 5, stateAfter: FilterState()),
            into: &update)
        _ = h.handle(.joined([DeliveryLedgerTests.stored(21, device: 2, second: 80)]))
        _ = h.handle(.turn(yield: false))
        #expect(Self.requests(h).first?.contains("id=d2") == true, "\(Self.requests(h))")
        #expect(h.round.results.map(\.deviceID) == [1, 2])
    }
}

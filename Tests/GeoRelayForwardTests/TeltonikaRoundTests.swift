import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The Teltonika round as a state machine: what it asks of its driver and what it settles,
/// event by event and byte by byte, without a socket.
@Suite(.offThePool) struct TeltonikaRoundTests {
    typealias Round = TeltonikaRound

    /// Device d1's four positions (seqs 11–14), one lane. Its id is short, so it goes in the
    /// same write as the first frame.
    struct Harness {
        var round: Round
        var ledger = DeliveryLedger(destination: "traccar")
        var now = RelayInstant(sinceOrigin: .seconds(1_000))
        var progress: [DeliveryUpdate] = []
        static let timeout: Duration = .seconds(30)

        init(carried: Round.Carried = Round.Carried(pipeline: 4), maxPositions: Int = 100, lanes: Int = 1) {
            let setup = Round.Setup(
                destination: "traccar", lanes: lanes, requestTimeout: Self.timeout, buffered: true, parkSeconds: 600,
                logger: .disabled, maxIdle: 64)
            var second = SettlementTests.batch(parked: false)
            second.cursor.deviceID = 2
            second.cursor.device = "d2"
            round = Round(
                [SettlementTests.batch(parked: false)] + (lanes > 1 ? [second] : []), setup: setup, carried: carried,
                maxPositions: maxPositions, now: now)
        }

        mutating func handle(_ event: Round.Event) -> [String] {
            round.handle(event, at: now, ledger: &ledger).described(progress: &progress)
        }

        /// Takes everything connection `id` has to write, as one write.
        mutating func written(_ id: Int) -> [UInt8] {
            guard let output = round.output(of: id) else { return [] }
            let bytes = Array(output.bytes[output.sent...])
            _ = handle(.wrote(id, count: bytes.count))
            return bytes
        }

        /// Feeds `bytes` one at a time; the actions of all the reads.
        mutating func receive(_ id: Int, _ bytes: [UInt8]) -> [String] {
            bytes.flatMap { byte in [byte].withUnsafeBytes { handle(.received(id, $0)) } }
        }

        mutating func finish() -> [String] { round.finish().described(progress: &progress) }

        var acknowledged: [Int64] { progress.flatMap(\.acknowledged).map(\.seq) }
        var quarantined: [Int64] { progress.flatMap(\.quarantined).map(\.seq) }
    }

    static let identification = try! TeltonikaCodec.identification(uniqueID: "d1")

    static func frame(_ seqs: ClosedRange<Int64>) -> [UInt8] {
        TeltonikaCodec.dataFrame(
            records: seqs.map {
                TeltonikaCodec.record(from: DeliveryLedgerTests.stored($0, second: $0).position)
            })
    }

    static func count(_ n: UInt8) -> [UInt8] { [0, 0, 0, n] }

    @Test func aDevicesFrameGoesWithItsIdAndItsCountSettlesItOnTheLastByte() {
        var h = Harness()
        #expect(h.handle(.turn(yield: false)) == ["open 0"], "a connection first, nothing framed before it")
        #expect(h.handle(.opened(0)) == ["send 0"])
        #expect(h.written(0) == Self.identification + Self.frame(11...14), "a short id goes with its frame")
        #expect(h.receive(0, [0x01, 0, 0, 0]).isEmpty)
        #expect(h.acknowledged.isEmpty, "nothing settled before the count's last byte")
        _ = h.receive(0, [4])
        #expect(h.acknowledged == [11, 12, 13, 14])
        #expect(
            h.progress.last?.sent ?? 0 > 0,
            "the hand-over says what it delivered (the recorder shows the destination online)")
        #expect(h.handle(.turn(yield: false)).isEmpty)
        #expect(h.round.isFinished)
        #expect(h.finish().isEmpty, "a connection that owes nothing is kept for the next round")
        #expect(h.round.carried.idle[1]?.id == 0)
    }

    @Test func aKeptConnectionIsCheckedBeforeItCarriesAFrameAndReplacedWhenClosed() {
        var first = Harness()
        _ = first.handle(.turn(yield: false))
        _ = first.handle(.opened(0))
        _ = first.written(0)
        _ = first.receive(0, [0x01] + Self.count(4))
        _ = first.handle(.turn(yield: false))
        _ = first.finish()
        var h = Harness(carried: first.round.carried)
        #expect(h.handle(.turn(yield: false)) == ["verify 0"], "nothing goes before the check")
        #expect(h.handle(.verified(0, fresh: true)) == ["send 0"])
        #expect(h.written(0) == Self.frame(11...14), "identified already: no id")

        var closed = Harness(carried: first.round.carried)
        _ = closed.handle(.turn(yield: false))
        #expect(closed.handle(.verified(0, fresh: false)) == ["open 0"], "closed meanwhile: a new connection")
        _ = closed.handle(.opened(0))
        #expect(closed.written(0) == Self.identification + Self.frame(11...14), "which identifies again")
    }

    @Test func anUnknownDeviceIsParkedAndItsConnectionClosed() {
        var h = Harness()
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        _ = h.written(0)
        #expect(h.receive(0, [0x00]) == ["close 0"])
        #expect(h.progress.flatMap(\.parked).count == 1)
        #expect(h.acknowledged.isEmpty)
        _ = h.handle(.turn(yield: false))
        #expect(h.round.isFinished)
        #expect(h.round.results[0].unavailable == nil, "the others go on")
    }

    @Test func aFrameRefusedByACloseGoesAloneThenInHalvesThenTheProbeDecides() {
        var h = Harness(maxPositions: 2)
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        #expect(h.written(0) == Self.identification + Self.frame(11...12), "the round's two positions")
        _ = h.receive(0, [0x01])
        // A clean close after 0x01 with the frame owed: Traccar's refusal, or a dying link.
        #expect(h.handle(.peerClosed(0)) == ["close 0"])
        #expect(h.handle(.turn(yield: false)) == ["open 0"], "once more, alone, on a fresh connection")
        _ = h.handle(.opened(0))
        #expect(h.written(0) == Self.identification + Self.frame(11...12))
        _ = h.receive(0, [0x01])
        _ = h.handle(.peerClosed(0))
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        #expect(h.written(0) == Self.identification + Self.frame(11...11), "closed twice: the front half")
        _ = h.receive(0, [0x01] + Self.count(1))
        #expect(h.acknowledged == [11])
        _ = h.handle(.turn(yield: false))
        #expect(h.written(0) == Self.frame(12...12), "then the back half")
        _ = h.handle(.peerClosed(0))
        // A single position closed the connection: the probe, on a connection of its own.
        #expect(h.handle(.turn(yield: false)) == ["open 1"])
        #expect(h.handle(.opened(1)) == ["send 1"])
        #expect(h.written(1) == TeltonikaProbe.identification)
        #expect(h.receive(1, [0x01]) == ["close 1"])
        #expect(h.quarantined == [12], "Traccar answers a probe: the position, not the link")
        _ = h.handle(.turn(yield: false))
        #expect(h.round.isFinished)
        #expect(h.round.results[0].unavailable == nil)
    }

    @Test func aProbeWithoutAnAnswerBlamesTheLink() {
        var h = Harness(maxPositions: 1)
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        _ = h.written(0)
        _ = h.receive(0, [0x01])
        _ = h.handle(.peerClosed(0))
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        _ = h.written(0)
        _ = h.receive(0, [0x01])
        _ = h.handle(.peerClosed(0))
        #expect(h.handle(.turn(yield: false)) == ["open 1"])
        _ = h.handle(.opened(1))
        _ = h.written(1)
        _ = h.handle(.peerClosed(1))
        #expect(h.round.results[0].unavailable != nil, "no answer to a position nor to a probe: the link")
        #expect(h.quarantined.isEmpty)
    }

    /// Every device's connection is asked for at once (a fleet's handshakes cost one round trip
    /// together, not one each); the first to fail ends the round, and the others start nothing.
    @Test func connectionsAreAskedForTogetherAndTheFirstFailureEndsTheRound() {
        var h = Harness(lanes: 2)
        #expect(h.handle(.turn(yield: false)) == ["open 0", "open 1"])
        #expect(h.handle(.opened(0)) == ["send 0"])
        var failed = Harness(lanes: 2)
        _ = failed.handle(.turn(yield: false))
        #expect(failed.handle(.openFailed(0, "Connection timed out")).isEmpty, "the round ends at the first failure")
        #expect(failed.round.isFinished)
        #expect(failed.round.results.map { $0.unavailable != nil } == [true, false])
    }

    @Test func aCountThatIsNotTheFramesFailsTheRoundAndSettlesNothing() {
        var h = Harness()
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        _ = h.written(0)
        #expect(h.receive(0, [0x01] + Self.count(3)) == ["close 0"])
        #expect(h.acknowledged.isEmpty)
        #expect(h.round.results[0].unavailable != nil)
    }

    @Test func silenceForTheRequestTimeoutFailsTheRound() {
        var h = Harness()
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        _ = h.written(0)
        h.now += Harness.timeout - .milliseconds(1)
        #expect(h.handle(.tick).isEmpty)
        h.now += .milliseconds(1)
        #expect(h.handle(.tick) == ["close 0"])
        #expect(h.round.results[0].unavailable != nil)
        _ = h.handle(.turn(yield: false))
        #expect(h.round.isFinished)
    }

    @Test func aStoppedRoundAbandonsWhatIsOnTheWireAndKeepsNoConnection() {
        var h = Harness()
        _ = h.handle(.turn(yield: false))
        _ = h.handle(.opened(0))
        _ = h.written(0)
        _ = h.handle(.stop)
        #expect(h.finish() == ["close 0"])
        #expect(h.round.results[0].abandoned == 4)
        #expect(h.round.carried.idle.isEmpty)
    }
}

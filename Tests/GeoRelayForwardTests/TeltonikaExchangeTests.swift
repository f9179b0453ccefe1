import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// One connection's Teltonika protocol without a socket: what goes out, in which writes, and what
/// each byte read means.
@Suite(.offThePool) struct TeltonikaExchangeTests {
    static func frame(_ count: Int) -> [UInt8] {
        let records = (0..<count).map { i in
            TeltonikaCodec.record(
                from: Position(device: "d", timeMs: 1_784_953_800_000 + Int64(i) * 1000, lat: 59, lon: 10.5))
        }
        return TeltonikaCodec.dataFrame(records: records)
    }

    static func exchange(_ id: String) throws -> TeltonikaExchange {
        TeltonikaExchange(identification: try TeltonikaCodec.identification(uniqueID: id))
    }

    /// Feeds `bytes` one at a time; the events of each read, in order.
    static func receive(_ bytes: [UInt8], into exchange: inout TeltonikaExchange) -> [[TeltonikaExchange.Event]] {
        bytes.map { byte in [byte].withUnsafeBytes { exchange.received($0) } }
    }

    static func writeAll(_ exchange: inout TeltonikaExchange) -> [UInt8] {
        let written = Array(exchange.output[exchange.sentBytes...])
        exchange.wrote(written.count)
        return written
    }

    @Test func aLongIdGoesAloneAndItsFrameFollowsTheAnswer() throws {
        var x = try Self.exchange("123456789012345")
        let frame = Self.frame(3)
        x.queue(frame: frame)
        #expect(Self.writeAll(&x) == x.identification, "the id alone: Traccar's decoder cuts it from the stream")
        #expect(!x.mayQueueFrame, "nothing goes behind an id whose answer may drop it")
        #expect(Self.receive([0x01], into: &x) == [[.identified(.known)]])
        #expect(Self.writeAll(&x) == frame, "the frame, once the id is known")
        #expect(Self.receive([0, 0, 0, 3], into: &x) == [[], [], [], [.acknowledged(3)]], "settled on the 4th byte")
        #expect(!x.isAwaiting)
    }

    /// A device the server has taken positions of: its first frame goes behind the id, a round
    /// trip sooner; were it deleted meanwhile, the `0x00` says so and the frame is never answered.
    @Test func aKnownDevicesLongIdGoesWithItsFrame() throws {
        let identification = try TeltonikaCodec.identification(uniqueID: "123456789012345")
        let frame = Self.frame(3)
        var x = TeltonikaExchange(identification: identification)
        x.queue(frame: frame, eager: true)
        #expect(Self.writeAll(&x) == identification + frame, "one write")
        #expect(!x.mayQueueFrame, "no second frame before the id's answer")
        #expect(Self.receive([0x01, 0, 0, 0, 3], into: &x) == [[.identified(.known)], [], [], [], [.acknowledged(3)]])
        #expect(x.mayQueueFrame)

        var deleted = TeltonikaExchange(identification: identification)
        deleted.queue(frame: frame, eager: true)
        _ = Self.writeAll(&deleted)
        #expect(Self.receive([0x00], into: &deleted) == [[.identified(.unknown)]])
        #expect(!deleted.isAwaiting, "Traccar drops the frame unanswered")
    }

    @Test func aShortIdGoesInTheSameWriteAsItsFrame() throws {
        var x = try Self.exchange("abc")
        let frame = Self.frame(2)
        x.queue(frame: frame)
        #expect(Self.writeAll(&x) == x.identification + frame)
        #expect(Self.receive([0x01, 0, 0, 0, 2], into: &x) == [[.identified(.known)], [], [], [], [.acknowledged(2)]])
    }

    @Test func framesGoBackToBackOnceKnownAndAreAnsweredInOrder() throws {
        var x = try Self.exchange("123456789012345")
        x.queue(frame: Self.frame(1))
        _ = Self.writeAll(&x)
        _ = Self.receive([0x01], into: &x)
        _ = Self.writeAll(&x)
        #expect(x.mayQueueFrame)
        x.queue(frame: Self.frame(2))
        x.queue(frame: Self.frame(3))
        #expect(Self.writeAll(&x) == Self.frame(2) + Self.frame(3))
        let answers = ([0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3] as [UInt8]).withUnsafeBytes { x.received($0) }
        #expect(answers == [.acknowledged(1), .acknowledged(2), .acknowledged(3)], "one read, three answers")
    }

    @Test func anUnknownDeviceIsToldAndItsFrameNeverGoes() throws {
        var x = try Self.exchange("123456789012345")
        x.queue(frame: Self.frame(1))
        _ = Self.writeAll(&x)
        #expect(Self.receive([0x00], into: &x) == [[.identified(.unknown)]])
        #expect(!x.hasOutput && !x.isAwaiting, "Traccar drops a frame after 0x00: nothing is owed")
    }

    @Test(arguments: [
        ([0x01, 0x01] as [UInt8], "bytes nobody asked for"),
        ([0x07], "identification"),
    ])
    func bytesThatAreNotTraccarsAnswerBreakTheConnection(_ reply: [UInt8], _ says: String) throws {
        var x = try Self.exchange("abc")
        x.queue(frame: Self.frame(1))
        _ = Self.writeAll(&x)
        // After the id's 0x01 the frame's answer is owed: a second 0x01 is its first byte, so feed
        // past the 4 bytes to reach what nobody asked for.
        let events = (reply == [0x01, 0x01] ? [0x01, 0, 0, 0, 1, 0x01] : reply).withUnsafeBytes { x.received($0) }
        guard case .broken(.notTraccar(let message)) = events.last else {
            Issue.record("expected a break, got \(events)")
            return
        }
        #expect(message.contains(says))
    }

    @Test func howTheConnectionEndedSaysWhoseDoingItWas() throws {
        var x = try Self.exchange("123456789012345")
        #expect(x.peerClosed() == .failed("the server closed the connection"), "nothing owed")
        x.queue(frame: Self.frame(1))
        _ = Self.writeAll(&x)
        guard case .failed = x.peerClosed() else {
            Issue.record("a close before the id's answer is the link's")
            return
        }
        _ = Self.receive([0x01], into: &x)
        _ = Self.writeAll(&x)
        #expect(x.peerClosed() == .closedUnanswered, "a clean close after 0x01 with a frame owed: a refusal")
        #expect(x.failed("reset") == .failed("reset"), "a reset with one frame owed is the link's")
        x.queue(frame: Self.frame(1))
        #expect(x.failed("reset") == .closedUnanswered, "a reset with frames behind the first is a refusal's echo")
    }

    @Test func theProbeIdentifiesAlone() throws {
        var x = try Self.exchange(TeltonikaProbe.uniqueID)
        #expect(x.identification == TeltonikaProbe.identification)
        x.queueIdentification()
        #expect(Self.writeAll(&x) == x.identification)
        #expect(Self.receive([0x01], into: &x) == [[.identified(.known)]])
        #expect(!x.hasOutput && !x.isAwaiting)
    }
}

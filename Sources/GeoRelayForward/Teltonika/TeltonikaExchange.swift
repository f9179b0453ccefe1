import GeoRelayCore

/// What one connection to Traccar's Teltonika port says and expects, without I/O: what to write
/// next, and what the bytes read mean. The bytes are moved by `RoundDriver` for the engine's
/// rounds (`TeltonikaRound`) and by `TeltonikaSession` for one-off exchanges; tests feed this
/// byte by byte.
///
/// It identifies once per connection: the id goes first, alone when it is long enough for
/// Traccar's frame decoder to cut it (12 bytes) and the server may not know the device, else in
/// the same write as the first data frame (`TeltonikaCodec.identificationNeedsCompanion`, or
/// `eager`); after a `0x01`, data frames follow, each answered with its record count. Once identified, frames may go back to back before their
/// answers: Traccar's frame decoder cuts every whole frame out of what it has read and the
/// protocol decoder answers each in turn, so the answers come in the frames' order.
///
/// How a connection ends matters to the owner (`Break`): Traccar refuses a frame it cannot
/// decode by closing the connection (a clean close, after it answered the id); everything
/// else (a reset, a close before any answer, bytes that are not Traccar's) is the link's or a
/// middlebox's doing, and proves nothing about the frame.
struct TeltonikaExchange {
    /// What the owner learns from the connection.
    enum Event: Equatable {
        /// The id's 1-byte answer. After `.unknown` Traccar drops data frames unanswered.
        case identified(TeltonikaCodec.IdentificationAnswer)
        /// A data frame's 4-byte answer: the number of records Traccar decoded.
        case acknowledged(Int)
        /// The connection is finished: nothing more will be answered on it.
        case broken(Break)
    }

    /// How a connection ended with something unanswered.
    enum Break: Equatable {
        /// A clean close after the id was answered `0x01`, with a data frame unanswered:
        /// how Traccar refuses a frame it cannot decode, and also what a dying link can look like.
        case closedUnanswered
        /// Bytes that are not Traccar's answer: something else listens there.
        case notTraccar(String)
        /// Reset, refused, closed before the id's answer, or failed otherwise: the link, not the frame.
        case failed(String)
    }

    private enum Expectation {
        case identification
        case count
    }

    let identification: [UInt8]
    /// The id was answered `0x01` on this connection: data frames go without identifying again.
    private(set) var isKnown = false
    /// Bytes queued for the socket; offered again from `sentBytes` until taken (see `CurlConnection`).
    private(set) var output: [UInt8] = []
    private(set) var sentBytes = 0
    /// A data frame waiting for the id's answer (a long id goes alone first).
    private var afterIdentification: [UInt8]?
    private var input: [UInt8] = []
    /// The answers the server owes, in order.
    private var awaiting: [Expectation] = []

    init(identification: [UInt8]) {
        self.identification = identification
    }

    var hasOutput: Bool { sentBytes < output.count }
    /// An answer is owed: the request timeout applies.
    var isAwaiting: Bool { !awaiting.isEmpty }
    /// Whether a data frame may be queued now: nothing owed, or frames behind frames once identified
    /// (never behind an identification whose answer may drop them).
    var mayQueueFrame: Bool { awaiting.isEmpty || (isKnown && afterIdentification == nil) }

    /// Queues a data frame, identifying first on a fresh connection. `eager`: the server has taken
    /// this device's positions before (`DeliveryLedger.window`), so the frame goes behind the id
    /// without waiting for its answer, a round trip sooner on every new connection (after an
    /// outage, every device's first). Were the device deleted meanwhile, Traccar drops that frame
    /// unanswered after its `0x00`, as it does a short id's companion.
    /// - Precondition: `mayQueueFrame`.
    mutating func queue(frame: [UInt8], eager: Bool = false) {
        precondition(mayQueueFrame, "a Teltonika frame queued behind an unanswered identification")
        if !hasOutput {
            output.removeAll(keepingCapacity: true)
            sentBytes = 0
        }
        if isKnown {
            output.append(contentsOf: frame)
            awaiting.append(.count)
        } else if eager || TeltonikaCodec.identificationNeedsCompanion(identification) {
            output = identification + frame
            awaiting = [.identification, .count]
        } else {
            output = identification
            afterIdentification = frame
            awaiting = [.identification]
        }
    }

    /// Queues the identification alone (the probe, a device identifying while it gives way).
    /// - Precondition: a fresh connection with nothing owed. An identification Traccar answers
    ///   alone: 12 bytes or more (`TeltonikaCodec.identificationNeedsCompanion`), else nothing
    ///   answers it until more bytes follow.
    mutating func queueIdentification() {
        precondition(awaiting.isEmpty && !isKnown, "a Teltonika identification on a busy or identified connection")
        output = identification
        sentBytes = 0
        awaiting = [.identification]
    }

    /// The socket took `count` more bytes of `output`.
    mutating func wrote(_ count: Int) {
        sentBytes += count
    }

    /// The answers in what was read, in order; a `.broken` event is always the last, and nothing
    /// more may be read after it.
    mutating func received(_ bytes: UnsafeRawBufferPointer) -> [Event] {
        input.append(contentsOf: bytes)
        var events: [Event] = []
        while let event = nextAnswer() {
            events.append(event)
            if case .broken = event { break }
        }
        return events
    }

    /// The peer closed. Only after a `0x01` with a frame unanswered is that Traccar's refusal.
    func peerClosed() -> Break {
        guard !awaiting.isEmpty else { return .failed("the server closed the connection") }
        return isKnown && awaiting.first == .count
            ? .closedUnanswered : .failed("the server closed the connection before answering the identification")
    }

    /// What a connection's error says. With frames back to back, Traccar's refusal of the first
    /// unanswered one looks like a reset, not a clean close: it closes with the frames behind it
    /// unread (or arriving after), and the kernel answers those with a reset. So a reset with more
    /// than one frame unanswered makes the first the suspect, which goes again alone, where a reset
    /// is the link's again.
    func failed(_ message: String) -> Break {
        isKnown && awaiting.count(where: { $0 == .count }) > 1 ? .closedUnanswered : .failed(message)
    }

    /// The next whole answer in `input`, if any.
    private mutating func nextAnswer() -> Event? {
        guard !input.isEmpty else { return nil }
        guard let expected = awaiting.first else {
            return .broken(.notTraccar("\(input.count) bytes nobody asked for"))
        }
        switch expected {
        case .identification:
            let byte = input.removeFirst()
            awaiting.removeFirst()
            do throws(TeltonikaCodecError) {
                let answer = try TeltonikaCodec.identificationAnswer(byte)
                isKnown = answer == .known
                if isKnown, let frame = afterIdentification {
                    afterIdentification = nil
                    output = frame
                    sentBytes = 0
                    awaiting = [.count]
                } else if answer == .unknown {
                    // Traccar drops a companion frame unanswered; nothing more will come.
                    awaiting.removeAll()
                    afterIdentification = nil
                }
                return .identified(answer)
            } catch {
                return .broken(.notTraccar(error.message))
            }
        case .count:
            guard input.count >= 4 else { return nil }
            let answer = input.prefix(4)
            input.removeFirst(4)
            awaiting.removeFirst()
            do throws(TeltonikaCodecError) {
                return .acknowledged(try TeltonikaCodec.parseAcknowledgement(answer))
            } catch {
                return .broken(.notTraccar(error.message))
            }
        }
    }
}

import GeoRelayCore

/// What the Teltonika round keeps per device, and per frame on the wire.
extension TeltonikaRound {
    /// One device's part of a round.
    struct Work {
        let batch: Int
        /// The device's connection (`Carried.connections`).
        let connection: ConnectionID
        let records: [TeltonikaCodec.Record]
        /// The first record not yet sent in a first attempt.
        var next = 0
        /// Frames to send before `next`: a retry, the frames that were on the wire behind it, or
        /// the halves of a frame that closed the connection unanswered twice; front first.
        var pending: [Frame] = []
        /// Sent and not answered, in the order they went (and are answered).
        var inFlight: [Frame] = []
        /// When the last answer on this work's connection came: the spacing of the next one,
        /// if that frame was already on the wire behind it.
        var lastAnswer: RelayInstant?
        /// A single record that closed the connection unanswered, awaiting the probe's verdict.
        var suspect: Int?
        /// The probe's connection while it runs.
        var canary: ConnectionID?
        /// A kept connection the driver is checking before it carries a frame.
        var verifying = false
        var done = false

        /// Only a first attempt goes behind another frame, and only behind first attempts: a
        /// frame that closed the connection is tried alone.
        var mayPipeline: Bool {
            inFlight.allSatisfy { $0.attempt == .first } && (pending.first?.attempt ?? .first) == .first
        }
    }

    struct Frame {
        var range: Range<Int>
        var attempt: Attempt
        var bytes = 0
        var sentAt = RelayInstant.origin
    }

    enum Attempt {
        /// Its records' first time out.
        case first
        /// Once more alone, after a close without an answer.
        case retry
        /// Half of a frame that closed the connection unanswered twice: a close halves it again.
        case split
    }
}

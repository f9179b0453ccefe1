import GeoRelayCore
import GeoRelaySpool

/// What push's round takes, asks for, carries and gives back.
extension PushRound {
    /// A batch as it goes on the wire.
    struct Batch: Sendable {
        var items: [Item]
        var body: [UInt8]
        var encoding: PushSettings.Compression
        var compression: PushForwarder.CompressionMeasurement?
        /// Positions the filter skipped, planned as if the batches before were delivered: settled in its turn.
        var settled: DeliveryUpdate?
        /// A backlog draining: its progress is committed within a second.
        var full: Bool
        /// Carries positions sent ahead of their backlog.
        var ahead: Bool
    }

    /// What the round waits for from its caller.
    enum Need {
        /// Room on the wire: the next batch, planned as if every batch before it were delivered,
        /// of at most `maxBytes` when set, or none.
        case batch(maxBytes: Int?)
        /// These positions again in `encoding` (halves of a batch refused as too large or bad, or
        /// a weaker encoding), a body each.
        case bodies([ArraySlice<Item>], PushSettings.Compression)
        /// A fresh token: the gateway answered 401 to `refused`.
        case token(refused: String)
    }

    /// Whether a round asks for more batches behind its first.
    enum Refill: Equatable {
        /// The first batch alone (a budget's remainder, a replay).
        case none
        /// A backlog's window: as many as keep the link busy.
        case window
        /// A trial (after backing off, the gateway not yet proven): one batch of at most `bytes`
        /// behind it before its answer, then the window once it is delivered, so the trial's
        /// answer costs the history no round trip of its own and a gateway still down no more
        /// than `bytes`.
        case trial(bytes: Int)
    }

    /// A body for `Need.bodies`.
    struct Encoded: Sendable {
        var body: [UInt8]
        var compression: PushForwarder.CompressionMeasurement? = nil
    }

    /// What the caller answers a need with.
    enum Supply {
        case batch(Batch, token: String)
        case bodies([Encoded])
        case token(String)
        /// Nothing comes: no batch to add, or no way to go on with the one that needs it (`stop`).
        case none(stop: Stop?)
    }

    enum Stop: Equatable {
        case auth(PushAuthError)
        case unavailable(String, retryAfter: Double?, transport: Bool)
    }

    /// What outlives a round: the connection's state, what the gateway and the link have shown.
    struct Carried {
        var lane = PipelinedLane<Int>()
        /// Whether the gateway keeps connections alive: nil until its first answer.
        var keepsAlive: Bool?
        var depth: PipelineDepth
        var state: PushForwarder.DeliveryState
    }

    /// The round's fixed parts.
    struct Setup {
        var destination: String
        var wire: PushProtocol
        var target: HTTP1Target
        var requestTimeout: Duration
        let logger: Logger
    }

    /// How the round ended.
    struct Outcome {
        var delivered = 0
        var refused = 0
        var stop: Stop?
        /// Positions in batches abandoned on the wire (the forwarder stopped): the gateway may have them.
        var abandoned = 0
    }

    /// A batch in the round, from its planning to its settling.
    struct Entry {
        let id: Int
        var batch: Batch
        var token: String
        /// On the wire: when it went, and whether another was unanswered then.
        var sentAt: RelayInstant?
        var behindAnother = false
        var requestBytes = 0
        /// Taken off the connection, waiting for its turn to settle.
        var answer: HTTPResponse?
        /// Lost with a connection once already.
        var retried = false
    }
}

import GeoRelayCore

/// What the pipelined round keeps per batch and per request in flight.
extension OsmAndRound {
    /// Where one batch stands in a round.
    struct Sending {
        /// The next delivery to send.
        var next = 0
        /// Its device stopped for this round.
        var stopped = false
        /// Stopped by an answer saying the server cannot take positions now (a 503): the answers
        /// behind it that took theirs settle out of turn.
        var unavailable = false
        /// The lane that took it.
        var lane: Int?
    }

    struct InFlight {
        var batch: Int
        var index: Int
        var attempt = Attempt.first
        var bytes = 0
        /// Its number and when it went, for the in-flight limit's round trips.
        var sequence: UInt64 = 0
        var sentAt = RelayInstant.origin
    }

    /// A request that got no answer is asked once more alone, then the canary (an empty
    /// request, not the position) decides whether the server or the link is at fault.
    enum Attempt {
        case first, retry, canary
        var next: Attempt { self == .first ? .retry : .canary }
    }

    /// How a connection ended with requests unanswered.
    enum Break {
        /// Closed or reset: the first unanswered request is the suspect.
        case closed(String)
        /// Timed out, or the server sent what cannot be an answer: the link (or server) is not usable now.
        case failed(String)
    }
}

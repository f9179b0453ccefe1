import GeoRelayCore

/// How many requests a destination keeps in flight across its connections.
///
/// A fixed pipelined window fills whatever buffer lies before the link's bottleneck: on a
/// 256 kbit/s terminal 128 requests are 40 KB waiting in the modem, which still go out over that
/// uplink after the route has moved, hold a spent budget's last round on the wire, and delay
/// anything urgent queued behind them. So the limit follows the round trip, as TCP Vegas sizes
/// its window: the shortest round trip seen is the path's own, anything above it is queueing,
/// and the limit keeps between `queuedAtLeast` and `queuedAtMost` requests waiting beyond what the
/// path itself holds (its bandwidth-delay product). While nothing queues it doubles every round
/// trip, so a fast server gets the configured window within a few of them.
///
/// A value without I/O: the engine tells it what it sends and what comes back, with the time.
package struct InFlightLimit: Sendable {
    /// The most requests the destination may have in flight (its window on every connection).
    package let ceiling: Int
    package private(set) var limit: Int
    /// The path's own round trip: the shortest seen since `baseSince`.
    package private(set) var baseRoundTrip: Duration?
    private var baseSince: RelayInstant?
    /// Doubling until the first round trip that shows a queue.
    private var growing = true
    private var nextSequence: UInt64 = 0
    /// A round trip ends with the answer to a request sent at or after this one.
    private var roundEndsWith: UInt64 = 0
    /// The shortest round trip of this round (later answers of a window wait behind earlier ones).
    private var roundShortest: Duration?
    /// Whether the limit was reached this round: only a limit in use may grow.
    private var roundFilled = false
    /// The shortest round trips of the rounds since `baseSince` was last renewed.
    private var renewalShortest: Duration?
    /// Answers since `rateSince`, and the rate of the last whole interval.
    private var rateAnswers = 0
    private var rateSince: RelayInstant?
    private var rate: Double?
    /// Seen to be loopback or a LAN: until the route moves, it stays one (a moment of a loaded
    /// box's slowness must not start limiting a window the CPU then cannot refill).
    private var local = false

    package static let queuedAtLeast = 1.0
    package static let queuedAtMost = 3.0
    package static let initial = 32
    /// Below this a round trip's excess is not queueing worth acting on: a loopback or LAN server
    /// busy on a small box (its queue is its CPU, which a smaller window would not relieve), a
    /// moment's jitter. On a slow link it is a request or two: 300 bytes at 256 kbit/s take 9 ms.
    package static let tolerance: Duration = .milliseconds(20)
    /// Nor is an excess below this share of the path's round trip: a window sent at once queues
    /// behind itself for a moment on any link, which would end the doubling long before a long
    /// path is full (on a geostationary link, at half of what it holds).
    package static let toleratedShare = 0.125
    /// A path this short that delivers `localRate` or more is loopback or a LAN, not a metered
    /// terminal: a queue there drains in moments, and what looks like one is the server's (or
    /// this box's) CPU, which a deep window keeps busy while the relay waits its turn. It keeps
    /// the whole window: on a 2-core box under load, limiting it cost a third of a loopback
    /// drain's speed. (The round trip alone does not tell: a shaper with a bucket lets a lone
    /// request through at once, and a terminal's modem may too.)
    package static let localRoundTrip: Duration = .milliseconds(2)
    /// Requests a second (about 1 Mbit/s of OsmAnd, four times what a shaped 256 kbit/s test link
    /// carries, which a lone request crosses in no time), measured over `rateInterval`. A slow
    /// link with a path under 2 ms exists only in a test lab; the rate keeps the lab honest.
    package static let localRate = 400.0
    package static let rateInterval: Duration = .milliseconds(250)
    /// The path's round trip is measured anew this often: a path can get longer without a route
    /// change (a satellite beam handover), and a base that stayed short would shrink the window.
    package static let baseLifetime: Duration = .seconds(30)

    package init(ceiling: Int) {
        self.ceiling = max(1, ceiling)
        limit = min(self.ceiling, Self.initial)
    }

    /// How many requests may start now with `outstanding` in flight: none until a batch's worth
    /// is free, so requests leave in batches a few to a TCP segment rather than one segment (and
    /// its 52 bytes of headers) each, as answers free their places one by one.
    /// - Parameter batch: what can go together: no more than a connection's window (with a window
    ///   of one, every request is its own segment, and waiting for a batch would leave every
    ///   connection but one idle).
    package func room(outstanding: Int, batch: Int = Self.batch) -> Int {
        let free = limit - outstanding
        return outstanding == 0 || free >= min(limit, batch) ? max(0, free) : 0
    }

    /// Requests that go together when a window refills: about one segment of OsmAnd requests.
    package static let batch = 4

    /// Forgets the path (a new route): the next requests measure it anew.
    package mutating func reset() {
        self = InFlightLimit(ceiling: ceiling)
    }

    /// Takes note of a request about to be sent with `inFlight` others outstanding; returns its
    /// sequence number, to be given back with its answer.
    package mutating func sending(inFlight: Int) -> UInt64 {
        if inFlight + 1 >= limit { roundFilled = true }
        defer { nextSequence += 1 }
        return nextSequence
    }

    /// Takes note of the answer to request `sequence`, `roundTrip` after it was sent.
    package mutating func answered(sequence: UInt64, roundTrip: Duration, now: RelayInstant) {
        roundShortest = min(roundShortest ?? roundTrip, roundTrip)
        renewalShortest = min(renewalShortest ?? roundTrip, roundTrip)
        rateAnswers += 1
        if let since = rateSince {
            if now - since >= Self.rateInterval {
                rate = Double(rateAnswers) / ((now - since) / .seconds(1))
                rateAnswers = 0
                rateSince = now
            }
        } else {
            rateSince = now
        }
        if baseRoundTrip == nil || roundTrip < baseRoundTrip! {
            baseRoundTrip = roundTrip
            baseSince = baseSince ?? now
        }
        guard sequence >= roundEndsWith, let shortest = roundShortest, let base = baseRoundTrip else { return }
        if local || (base < Self.localRoundTrip && (rate ?? 0) >= Self.localRate) {
            local = true
            limit = ceiling
        } else if base >= Self.localRoundTrip || rate != nil {
            // (A short path waits for its first rate before it is limited.)
            adjust(shortest: shortest, base: base)
        }
        if let since = baseSince, now - since >= Self.baseLifetime, let renewed = renewalShortest {
            baseRoundTrip = renewed
            baseSince = now
            renewalShortest = nil
        }
        roundEndsWith = nextSequence
        roundShortest = nil
        roundFilled = false
    }

    /// Requests waiting in queues, estimated from a round trip over the path's own.
    package static func queued(limit: Int, roundTrip: Duration, base: Duration) -> Double {
        let excess = roundTrip - base - max(tolerance, base * toleratedShare)
        guard excess > .zero, roundTrip > .zero else { return 0 }
        return Double(limit) * (excess / roundTrip)
    }

    private mutating func adjust(shortest: Duration, base: Duration) {
        let queued = Self.queued(limit: limit, roundTrip: shortest, base: base)
        // What the path holds, and a few more: where a queue that grew too long goes back to.
        // base ≤ shortest (both are round trips seen, base the least), so the share is at most 1;
        // a zero round trip (two clock reads alike) counts as no queue rather than 0/0.
        let share = shortest > .zero ? min(1, max(0, base / shortest)) : 1
        let held = Int(Double(limit) * share + Self.queuedAtMost)
        if growing {
            if queued > Self.queuedAtLeast {
                growing = false
                limit = min(limit, max(1, held))
            } else if roundFilled {
                limit = min(ceiling, limit * 2)
            }
        } else if queued > Self.queuedAtMost {
            limit = max(1, min(limit - 1, held))
        } else if queued < Self.queuedAtLeast, roundFilled {
            limit = min(ceiling, limit + 1)
        }
    }
}

import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The in-flight limit against a simulated bottleneck: requests leave one after another at the
/// link's rate and are answered a propagation delay later, as on a terminal whose modem queues
/// whatever it is given. No sockets, no clocks: the simulation's time is its own.
@Suite(.offThePool) struct InFlightLimitTests {
    struct Link {
        /// How long one request (and its answer) holds the bottleneck.
        var perRequest: Duration
        /// The path's round trip without queueing.
        var propagation: Duration
        var pathHolds: Double { propagation / perRequest + 1 }
    }

    /// Sends `count` requests as fast as the limit allows; returns the limit after each answer
    /// and the most requests that waited at the bottleneck at once in the last quarter.
    static func run(_ limit: inout InFlightLimit, over link: Link, count: Int, from start: RelayInstant) -> (
        limits: [Int], queuedLate: Int, end: RelayInstant
    ) {
        var now = start
        var linkFree = start
        var inFlight:
            [(
                sequence: UInt64, sent: RelayInstant, answer: RelayInstant,
                leaves: RelayInstant
            )] = []
        var sent = 0
        var answered = 0
        var limits: [Int] = []
        var queuedLate = 0
        while answered < count {
            var room = limit.room(outstanding: inFlight.count)
            while room > 0, sent < count {
                room -= 1
                let sequence = limit.sending(inFlight: inFlight.count)
                let leaves = max(now, linkFree) + link.perRequest
                linkFree = leaves
                inFlight.append((sequence, now, leaves + link.propagation, leaves))
                sent += 1
            }
            if answered > count * 3 / 4 {
                queuedLate = max(queuedLate, inFlight.filter { $0.leaves > now + link.perRequest }.count)
            }
            let next = inFlight.removeFirst()
            now = next.answer
            limit.answered(sequence: next.sequence, roundTrip: next.answer - next.sent, now: now)
            answered += 1
            limits.append(limit.limit)
        }
        return (limits, queuedLate, now)
    }

    /// A fresh limit over `link` for `count` requests: the limit after each answer, the most
    /// requests waiting late on, and the share of the time the bottleneck was sending.
    static func measure(_ link: Link, count: Int) -> (limits: [Int], queuedLate: Int, busy: Double) {
        var limit = InFlightLimit(ceiling: 512)
        let start = RelayInstant(sinceOrigin: .seconds(1_000))
        let (limits, queuedLate, end) = run(&limit, over: link, count: count, from: start)
        return (limits, queuedLate, (link.perRequest * count + link.propagation) / (end - start))
    }

    /// Loopback or a LAN under load: the server's CPU queues, not a link. The window stays whole.
    @Test func aLocalServerKeepsTheWholeWindowWhateverItsQueue() {
        var limit = InFlightLimit(ceiling: 512)
        let busyServer = Link(perRequest: .microseconds(300), propagation: .microseconds(200))
        let (limits, _, end) = Self.run(
            &limit, over: busyServer, count: 5_000, from: RelayInstant(sinceOrigin: .seconds(1_000)))
        #expect(limits.suffix(4_000).allSatisfy { $0 == 512 })
        // A loaded box's slow spell (the server's CPU taken by something else) does not start
        // limiting it: only a new route does.
        let slowSpell = Link(perRequest: .milliseconds(5), propagation: .microseconds(200))
        let (spell, _, _) = Self.run(&limit, over: slowSpell, count: 2_000, from: end)
        #expect(spell.allSatisfy { $0 == 512 })
        limit.reset()
        #expect(limit.limit == InFlightLimit.initial)
    }

    @Test func aFastServerGetsTheWholeWindowWithinAFewRoundTrips() {
        var limit = InFlightLimit(ceiling: 512)
        let link = Link(perRequest: .microseconds(20), propagation: .milliseconds(20))
        let (limits, _, _) = Self.run(
            &limit, over: link, count: 5_000, from: RelayInstant(sinceOrigin: .seconds(1_000)))
        #expect(
            limits.last == 512,
            "\(limits.enumerated().filter { $0.offset == 0 || limits[$0.offset - 1] != $0.element }.map { "\($0.offset):\($0.element)" })"
        )
        #expect(
            limits.firstIndex(of: 512).map { $0 < 2_000 } == true,
            "reached the ceiling only after \(limits.firstIndex(of: 512) ?? -1) answers")
    }

    /// 256 kbit/s, 300-byte requests, a few milliseconds of path: the link holds about one
    /// request, so a window of 128 would be 127 requests waiting in the modem.
    @Test func aSlowLinkKeepsOnlyAFewRequestsWaiting() {
        let link = Link(perRequest: .microseconds(9_400), propagation: .milliseconds(5))
        let (limits, queuedLate, busy) = Self.measure(link, count: 600)
        #expect(busy > 0.95, "the link stays busy")
        // What is tolerated as jitter, the few kept waiting, and a batch (places free up one by one
        // and fill a batch at a time, so the window swings by one).
        let tolerated =
            Int(InFlightLimit.tolerance / link.perRequest) + Int(InFlightLimit.queuedAtMost) + InFlightLimit.batch
        #expect(limits.suffix(300).allSatisfy { $0 <= Int(link.pathHolds) + tolerated }, "\(limits.suffix(300))")
        #expect(queuedLate <= tolerated, "\(queuedLate) requests waited at the bottleneck")
        #expect(limits.last! >= 2, "the link stays busy: \(limits.last!)")
    }

    /// A geostationary link: 600 ms of path at 256 kbit/s holds about 64 requests; the limit
    /// grows to that and not much past it.
    @Test func aLongLinkIsKeptFull() {
        let link = Link(perRequest: .microseconds(9_400), propagation: .milliseconds(600))
        let (limits, queuedLate, busy) = Self.measure(link, count: 3_000)
        #expect(busy > 0.9, "the link stays busy")
        let holds = Int(link.pathHolds)
        let tolerated =
            Int(link.propagation * InFlightLimit.toleratedShare / link.perRequest) + 2 * Int(InFlightLimit.queuedAtMost)
            + InFlightLimit.batch
        #expect(
            limits.suffix(1_000).allSatisfy { $0 >= holds - 1 && $0 <= holds + tolerated },
            "path holds \(holds): \(Set(limits.suffix(1_000)).sorted())")
        #expect(queuedLate <= tolerated, "\(queuedLate) requests waited at the bottleneck")
    }

    /// The path gets longer without a route change: within the base's lifetime and a few round
    /// trips the limit grows to what the longer path holds.
    @Test func aLongerPathIsMeasuredAnew() {
        var limit = InFlightLimit(ceiling: 512)
        let short = Link(perRequest: .microseconds(9_400), propagation: .milliseconds(50))
        let long = Link(perRequest: .microseconds(9_400), propagation: .milliseconds(600))
        let (_, _, end) = Self.run(&limit, over: short, count: 2_000, from: RelayInstant(sinceOrigin: .seconds(1_000)))
        #expect(
            limit.limit <= Int(short.pathHolds) + Int(InFlightLimit.tolerance / short.perRequest) + 2
                * Int(InFlightLimit.queuedAtMost))
        let (limits, _, _) = Self.run(&limit, over: long, count: 8_000, from: end)
        #expect(
            limits.last! >= Int(long.pathHolds) - 1, "limit \(limits.last!) on a path holding \(Int(long.pathHolds))")
    }

    @Test func aLimitNotInUseDoesNotGrowAndAResetStartsAgain() {
        var limit = InFlightLimit(ceiling: 512)
        let start = RelayInstant(sinceOrigin: .seconds(1_000))
        for step in 0..<100 {
            let sequence = limit.sending(inFlight: 0)
            limit.answered(sequence: sequence, roundTrip: .milliseconds(50), now: start + .milliseconds(100 * step))
        }
        #expect(limit.limit == InFlightLimit.initial, "one request at a time never showed the link could take more")
        var full = InFlightLimit(ceiling: 2 * InFlightLimit.initial)
        let link = Link(perRequest: .microseconds(200), propagation: .milliseconds(20))
        _ = Self.run(&full, over: link, count: 500, from: start)
        #expect(full.limit == 2 * InFlightLimit.initial, "at most the ceiling")
        full.reset()
        #expect(full.limit == InFlightLimit.initial && full.baseRoundTrip == nil)
    }

    /// Two reads of the clock alike make a zero round trip: no queue, and no 0/0 to convert
    /// (a hundred answers a second on a short path: limited, so the share is computed).
    @Test func aZeroRoundTripIsNoQueue() {
        var limit = InFlightLimit(ceiling: 512)
        let now = RelayInstant(sinceOrigin: .seconds(1_000))
        for step in 0..<200 {
            let sequence = limit.sending(inFlight: 0)
            limit.answered(sequence: sequence, roundTrip: .zero, now: now + .milliseconds(10 * step))
        }
        #expect(limit.limit >= 1 && limit.limit <= 512)
        #expect(InFlightLimit.queued(limit: 10, roundTrip: .zero, base: .zero) == 0)
    }

    @Test func queueingIsTheRoundTripBeyondThePathsOwn() {
        #expect(InFlightLimit.queued(limit: 10, roundTrip: .milliseconds(100), base: .milliseconds(100)) == 0)
        #expect(
            InFlightLimit.queued(limit: 10, roundTrip: .milliseconds(3), base: .microseconds(100)) == 0,
            "loopback jitter is not a queue")
        let base = Duration.milliseconds(100)
        let roundTrip = base * 2 + max(InFlightLimit.tolerance, base * InFlightLimit.toleratedShare)
        let queued = InFlightLimit.queued(limit: 10, roundTrip: roundTrip, base: base)
        #expect(
            abs(queued - 10 * (base / roundTrip)) < 0.01,
            "half the round trip queueing, beyond what is tolerated: \(queued)")
        #expect(
            InFlightLimit.queued(limit: 64, roundTrip: .milliseconds(660), base: .milliseconds(600)) == 0,
            "a window sent at once queues behind itself")
    }

    @Test func requestsStartInBatches() {
        var limit = InFlightLimit(ceiling: 512)
        #expect(limit.room(outstanding: 0) == InFlightLimit.initial)
        #expect(limit.room(outstanding: InFlightLimit.initial - 1) == 0, "one place free: wait for a batch")
        #expect(limit.room(outstanding: InFlightLimit.initial - InFlightLimit.batch) == InFlightLimit.batch)
        let small = InFlightLimit(ceiling: 2)
        #expect(small.room(outstanding: 0) == 2 && small.room(outstanding: 1) == 0)
        // Four connections with a window of one each: a request goes as soon as any place frees.
        let oneEach = InFlightLimit(ceiling: 4)
        #expect(oneEach.room(outstanding: 3, batch: 1) == 1 && oneEach.room(outstanding: 3) == 0)
        _ = limit.sending(inFlight: 0)
    }
}

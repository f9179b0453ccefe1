import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// The return watch's decisions on a clock the test moves: what it does on each kind of terminal
/// (`../shared/LINKS.md`), and what each look costs. No sockets, no waiting.
@Suite(.offThePool) struct ReturnWatchTests {
    static let second: UInt64 = 1_000_000_000
    static let t0: UInt64 = 1_000 * second
    static let probeTimeout = Duration.seconds(20)

    /// A watch after a failure at the backoff's ceiling (5 min), probing every 15 s, connections every 2 s.
    static func watch(connect: Bool = true) -> ReturnWatch {
        ReturnWatch(
            delaySeconds: 300, ceilingSeconds: 300, backoffMinSeconds: 5,
            timing: .init(
                connectEvery: connect ? .seconds(2) : nil, probeTimeout: probeTimeout, probeIntervalSeconds: 15),
            nowNs: t0, random: SeededRandom(seed: 7))
    }

    /// The I/O action among `actions` (the last one), without notes and status.
    static func step(_ actions: [ReturnWatch.Action]) -> ReturnWatch.Action {
        actions.last { if case .note = $0 { false } else if case .show = $0 { false } else { true } }!
    }

    static func dueNs(_ actions: [ReturnWatch.Action]) -> UInt64? {
        actions.lazy.compactMap { if case .show(_, let at) = $0 { at } else { nil } }.first
    }

    /// Runs the watch for `seconds` of simulated time against a terminal that answers each look
    /// as `answer` says (after `tookNs`); returns the looks made, by kind.
    static func simulate(
        seconds: UInt64, connect: ConnectCheck.Outcome, probe: ServerCheck.Answer, probeTookNs: UInt64
    ) -> (connects: Int, probes: Int, resumed: DestinationLink.Resumption?) {
        var w = watch()
        var now = t0
        var (connects, probes) = (0, 0)
        var actions = w.start(nowNs: now)
        while now < t0 + seconds * second {
            let event: ReturnWatch.Event
            switch step(actions) {
            case .connect:
                connects += 1
                now += 1_000_000
                event = .connected(connect)
            case .probe(let timeout):
                probes += 1
                let took = min(probeTookNs, SystemClock.nanoseconds(timeout))
                now += took
                event = .probed(probe, tookNs: took)
            case .sleep(let until, _):
                now = max(now, until)
                event = .woke
            case .resume(let how):
                return (connects, probes, how)
            default:
                Issue.record("no I/O action in \(actions)")
                return (connects, probes, nil)
            }
            actions = w.handle(event, nowNs: now)
        }
        return (connects, probes, nil)
    }

    /// Over the backoff's ceiling (5 min), what each kind of terminal costs in looks: never a
    /// busy loop, and the insurance payload at the ceiling.
    @Test func noTerminalMakesTheWatchSpin() {
        // Closes on board: a connection and a probe each half second, all free.
        let closing = Self.simulate(seconds: 600, connect: .openedHere, probe: .nothing, probeTookNs: 1_000_000)
        #expect(closing.resumed == .trial)
        #expect(closing.connects <= 2 * 300 + 20 && closing.connects >= 300, "\(closing)")
        #expect(closing.probes <= closing.connects + 300 / 5, "\(closing)")
        // Holds: one probe per slot (15 s once settled), each waiting on board.
        let holding = Self.simulate(seconds: 600, connect: .openedHere, probe: .nothing, probeTookNs: .max)
        #expect(holding.resumed == .trial)
        #expect(holding.probes <= 300 / 15 + 2, "\(holding)")
        // Refuses: a connection attempt each half second, and no probe: while attempts fail below
        // TCP they see the return first, a round trip sooner than a probe's connection would.
        let refusing = Self.simulate(seconds: 600, connect: .refusedHere, probe: .nothing, probeTookNs: 1_000_000)
        #expect(refusing.connects <= 2 * 300 + 2 && refusing.connects >= 2 * 300 - 2, "\(refusing)")
        #expect(refusing.probes == 0, "\(refusing)")
        // Drops: attempts at their interval (each timed out), and no probe.
        let dropping = Self.simulate(seconds: 600, connect: .failed, probe: .nothing, probeTookNs: 10 * Self.second)
        #expect(dropping.connects <= 300 / 2 + 2 && dropping.connects >= 300 / 2 - 2, "\(dropping)")
        #expect(dropping.probes == 0, "\(dropping)")
    }

    @Test func aRefusingTerminalIsTriedEveryHalfSecondAndItsFirstOpenConnectionIsTheReturn() {
        var w = Self.watch()
        #expect(Self.step(w.start(nowNs: Self.t0)) == .connect)
        let refused = w.handle(.connected(.refusedHere), nowNs: Self.t0 + 1_000_000)
        #expect(Self.step(refused) == .sleep(untilNs: Self.t0 + Self.second / 2, earliestOnChangeNs: nil))
        #expect(
            refused.contains(
                .note(
                    "no connection to the destination: trying every 2 s (every 500 ms while this side of the uplink refuses)"
                )))
        #expect(w.handle(.woke, nowNs: Self.t0 + Self.second / 2) == [.connect])
        #expect(Self.step(w.handle(.connected(.openedHere), nowNs: Self.t0 + Self.second / 2)) == .resume(.trial))
    }

    @Test func aTerminalThatDropsHandshakesIsTriedAtTheConnectInterval() {
        var w = Self.watch()
        _ = w.start(nowNs: Self.t0)
        // The attempt timed out after its 2 s: the next goes at once.
        #expect(
            Self.step(w.handle(.connected(.failed), nowNs: Self.t0 + 2 * Self.second))
                == .sleep(untilNs: Self.t0 + 2 * Self.second, earliestOnChangeNs: nil))
        #expect(w.handle(.woke, nowNs: Self.t0 + 2 * Self.second) == [.connect])
        #expect(Self.step(w.handle(.connected(.opened), nowNs: Self.t0 + 3 * Self.second)) == .resume(.trial))
    }

    /// An accelerator that answers the handshake on board and closes: each look is a connection and
    /// a probe closed on this side, half a second apart, for nothing; the first probe answered is the return.
    @Test func aTerminalThatClosesOnBoardIsProbedThroughEveryHalfSecond() {
        var w = Self.watch()
        let start = w.start(nowNs: Self.t0)
        let due = try! #require(Self.dueNs(start))
        var now = Self.t0
        var probes = 0
        for _ in 0..<100 {
            #expect(Self.step(w.handle(.woke, nowNs: now)) == .connect || now == Self.t0)
            let opened = w.handle(.connected(.openedHere), nowNs: now)
            guard case .probe = Self.step(opened) else {
                Issue.record("after an open on board: \(opened)")
                return
            }
            probes += 1
            let closed = w.handle(.probed(.nothing, tookNs: 1_000_000), nowNs: now + 1_000_000)
            guard case .sleep(let until, _) = Self.step(closed) else {
                Issue.record("after a probe closed on board: \(closed)")
                return
            }
            #expect(until <= now + 1_000_000 + Self.second / 2)
            now = until
            if now >= due { break }
        }
        #expect(probes >= 10, "\(probes) looks before the probe slot")
        #expect(Self.step(w.handle(.probed(.server, tookNs: 600_000_000), nowNs: now)) == .resume(.proven))
    }

    /// An accelerator that holds the connection: the probe through it waits on board until the next
    /// was due, plus its own timeout; then the next goes at once. One probe a slot, always one waiting.
    @Test func aTerminalThatHoldsAlwaysHasOneProbeWaitingOnBoard() {
        var w = Self.watch()
        let due = try! #require(Self.dueNs(w.start(nowNs: Self.t0)))
        let held = w.handle(.connected(.openedHere), nowNs: Self.t0 + 1_000_000)
        let expected = Duration.nanoseconds(Int64(due - Self.t0 - 1_000_000)) + Self.probeTimeout
        #expect(Self.step(held) == .probe(timeout: expected))
        let end = Self.t0 + 1_000_000 + SystemClock.nanoseconds(expected)
        let after = w.handle(.probed(.nothing, tookNs: end - Self.t0), nowNs: end)
        #expect(Self.step(after) == .connect, "the next probe goes on board at once")
        let nextDue = try! #require(Self.dueNs(after))
        #expect(nextDue > end, "a new slot")
        guard case .probe(let timeout) = Self.step(w.handle(.connected(.openedHere), nowNs: end)) else {
            Issue.record("no probe through the next connection")
            return
        }
        #expect(timeout == .nanoseconds(Int64(nextDue - end)) + Self.probeTimeout)
        #expect(
            Self.step(w.handle(.probed(.server, tookNs: 3 * Self.second), nowNs: end + 3 * Self.second))
                == .resume(.proven))
    }

    /// A connection across the link at the first attempt, and its probe unanswered: the failure is
    /// above TCP, so attempts stop and the probes keep their spacing.
    @Test func aFailureAboveTCPStopsTheConnectionsAndKeepsTheProbesSpacing() {
        var w = Self.watch()
        let due = try! #require(Self.dueNs(w.start(nowNs: Self.t0)))
        let opened = w.handle(.connected(.opened), nowNs: Self.t0 + Self.second / 2)
        #expect(opened.contains(.note("a connection to the destination opened: probing now")))
        #expect(Self.step(opened) == .probe(timeout: Self.probeTimeout))
        let silent = w.handle(.probed(.nothing, tookNs: Self.second), nowNs: Self.t0 + 2 * Self.second)
        #expect(Self.step(silent) == .sleep(untilNs: due, earliestOnChangeNs: nil))
        #expect(Self.step(w.handle(.woke, nowNs: due)) == .probe(timeout: Self.probeTimeout))
        let next = w.handle(.probed(.nothing, tookNs: 20 * Self.second), nowNs: due + 20 * Self.second)
        let nextDue = try! #require(Self.dueNs(next))
        #expect(Self.step(next) == .sleep(untilNs: nextDue, earliestOnChangeNs: nil), "no connection attempts")
    }

    @Test func anAnswerThatShowsOnlyAPathSendsAPayloadAtTheBackoffTime() {
        var w = ReturnWatch(
            delaySeconds: 30, ceilingSeconds: 300, backoffMinSeconds: 5,
            timing: .init(connectEvery: .seconds(2), probeTimeout: Self.probeTimeout, probeIntervalSeconds: 15),
            nowNs: Self.t0, random: SeededRandom(seed: 1))
        _ = w.start(nowNs: Self.t0)
        let path = w.handle(.probed(.path, tookNs: Self.second), nowNs: Self.t0 + Self.second)
        #expect(path.contains(.show(.backoff, atNs: Self.t0 + 30 * Self.second)))
        #expect(Self.step(path) == .sleep(untilNs: Self.t0 + 30 * Self.second, earliestOnChangeNs: nil))
        #expect(w.handle(.woke, nowNs: Self.t0 + 30 * Self.second) == [.resume(.trial)])
    }

    /// Whatever the looks say, a payload goes once a backoff ceiling: in case only they cannot get through.
    @Test func thePayloadGoesAtTheCeilingWhateverTheLooksSay() {
        var w = Self.watch(connect: false)
        let start = w.start(nowNs: Self.t0)
        guard case .sleep(let firstDue, nil) = Self.step(start) else {
            Issue.record("without connection attempts the watch sleeps to the probe: \(start)")
            return
        }
        var now = firstDue
        var probes = 0
        while probes < 100 {
            let actions = w.handle(.woke, nowNs: now)
            if Self.step(actions) == .resume(.trial) { break }
            #expect(Self.step(actions) == .probe(timeout: Self.probeTimeout))
            probes += 1
            now += SystemClock.nanoseconds(Self.probeTimeout)
            let after = w.handle(.probed(.nothing, tookNs: SystemClock.nanoseconds(Self.probeTimeout)), nowNs: now)
            if Self.step(after) == .resume(.trial) { break }
            guard case .sleep(let until, _) = Self.step(after) else { break }
            now = until
        }
        #expect(now <= Self.t0 + 300 * Self.second + SystemClock.nanoseconds(Self.probeTimeout))
        #expect(probes >= 5 && probes <= 300 / 15, "\(probes) probes in a ceiling")
    }
}

import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

@testable import GeoRelayForward

/// Bare connection attempts while a destination is down: the link's return is noticed between
/// probes, and a path that takes connections but never answers is not probed more for it.
@Suite(.offThePool) struct ConnectCheckTests {
    @Test func aConnectionStandsForTheHostAndPortTheDestinationUses() {
        #expect(ConnectCheck.target(for: "http://traccar.example:5055/") == "telnet://traccar.example:5055")
        #expect(ConnectCheck.target(for: "http://traccar.example") == "telnet://traccar.example:80")
        #expect(ConnectCheck.target(for: "https://gw.example/push?x=1") == "telnet://gw.example:443")
        #expect(ConnectCheck.target(for: "http://[::1]:8082/api") == "telnet://[::1]:8082")
        #expect(ConnectCheck.target(for: "tcp://traccar.example") == "telnet://traccar.example:5027")
        #expect(ConnectCheck.target(for: "tls://traccar.example:5028") == "telnet://traccar.example:5028")
        // Credentials in the URL: the host past them, and nothing of them.
        #expect(ConnectCheck.target(for: "http://user:secret@traccar.example/") == "telnet://traccar.example:80")
    }

    /// A trial is each device's current position: a fleet's all in the one round after the link's
    /// return, within a budget's remainder, never more than the bound and never nothing.
    @Test func aTrialCarriesOnePositionForEachDevice() {
        #expect(RoundPlanner.trialPositions(devices: 1, fitting: .max) == 1)
        #expect(RoundPlanner.trialPositions(devices: 40, fitting: .max) == 40)
        #expect(RoundPlanner.trialPositions(devices: 500, fitting: .max) == RoundPlanner.trialPositions)
        #expect(RoundPlanner.trialPositions(devices: 40, fitting: 3) == 3)
        #expect(RoundPlanner.trialPositions(devices: 0, fitting: 0) == 1)
    }

    /// A forwarder behind a fault proxy, probing every minute, that has delivered two positions
    /// and then finds the link broken in `mode` with two more to send; `body` runs meanwhile.
    func withBrokenLink(
        _ mode: FaultProxy.Mode, connectSeconds: Double, connectTimeoutSeconds: Double,
        requestTimeoutSeconds: Double = 30,
        _ body: (ForwardFixture, FaultProxy, FakeOsmAndServer) async throws -> Void
    ) async throws {
        let server = try FakeOsmAndServer()
        defer { server.http.stop() }
        let proxy = try FaultProxy(targetPort: server.http.port)
        defer { proxy.stop() }
        let f = try await ForwardFixture(concurrency: 1) { settings in
            settings.url = "http://127.0.0.1:\(proxy.port)/"
            settings.backoffMinSeconds = 60
            settings.backoffMaxSeconds = 120
            settings.probeIntervalSeconds = 60
            settings.probeConnectSeconds = connectSeconds
            settings.connectTimeoutSeconds = connectTimeoutSeconds
            settings.requestTimeoutSeconds = requestTimeoutSeconds
        }
        try await f.withForwarder {
            _ = await f.spool.append(track("a", count: 2))
            try await f.waitForStatus { $0.pending == 0 }
            proxy.setMode(mode)
            _ = await f.spool.append(track("a", count: 2, from: 2))
            try await body(f, proxy, server)
        }
    }

    /// Probes every minute, connection attempts every half second: after the link comes back,
    /// delivery resumes before the probe that was due, and the connection that saw the link's
    /// return brought a trial position, not a probe of its own (a connection and a round trip less).
    @Test func theLinksReturnIsNoticedBeforeTheNextProbe() async throws {
        try await withBrokenLink(.refuse, connectSeconds: 0.5, connectTimeoutSeconds: 1) { f, proxy, server in
            let down = try await f.waitForStatus { $0.state == "probing" && $0.nextAttemptMs != nil }
            let probeDueMs = try #require(down.nextAttemptMs, "probing, with the next probe's time")
            let probes = server.probeCount
            proxy.setMode(.pass)
            #expect(
                await server.waitUntil(timeout: .seconds(50)) { $0.count >= 4 }, "delivered after the link came back")
            let deliveredMs = WallClock.nowMs()
            #expect(deliveredMs < probeDueMs, "delivered \(probeDueMs - deliveredMs) ms before the probe was due")
            #expect(
                server.probeCount == probes,
                "\(server.probeCount - probes) probes at the link's return: a trial position proves the server")
            // Only the payload that found the link down went while it was (curl resends it once on a
            // fresh connection when the kept-alive one died): the connection attempts carry nothing.
            #expect(proxy.counters.payloadsWhileDown <= 2, "\(proxy.counters.payloadsWhileDown) payloads while down")
        }
    }

    /// Attempts and probes a minute apart, and the link refused on this host (as a terminal's
    /// router refuses while its link is down): nothing crossed an uplink, so attempts go every half
    /// second and the link's return is seen within one, not at the next attempt a minute on.
    @Test func aRefusalFromThisSideOfTheUplinkIsTriedAgainEveryHalfSecond() async throws {
        try await withBrokenLink(.refuse, connectSeconds: 60, connectTimeoutSeconds: 1) { f, proxy, server in
            let deadline = ContinuousClock.now + .seconds(30)
            while !f.log.messages.contains(where: { $0.contains("while this side of the uplink refuses") }),
                ContinuousClock.now < deadline
            {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(
                f.log.messages.contains {
                    $0.contains("trying every 60 s (every 500 ms while this side of the uplink refuses)")
                },
                "the log says how the return will be seen:\n\(f.log.tail())")
            let back = ContinuousClock.now
            proxy.setMode(.pass)
            #expect(
                await server.waitUntil(timeout: .seconds(20)) { $0.count >= 4 },
                "delivered after the link came back\n\(f.log.tail())")
            let took = back.duration(to: .now)
            #expect(
                took < .seconds(10), "delivered \(took) after the link came back: attempts were not every half second")
        }
    }

    /// Only an answer quicker than any uplink's round trip was free, an open as well as a refusal; a
    /// refusal that took longer crossed the link and keeps the configured spacing, as does a timeout.
    @Test(arguments: [
        (false, Duration.milliseconds(0), ConnectCheck.Outcome.refusedHere),
        (false, .microseconds(9_999), .refusedHere),
        (false, .milliseconds(10), .failed),
        (false, .milliseconds(600), .failed),
        (false, .seconds(2), .failed),
        (true, .microseconds(100), .openedHere),
        (true, .microseconds(9_999), .openedHere),
        (true, .milliseconds(10), .opened),
        (true, .seconds(1), .opened),
    ])
    func anAttemptRefusedQuickerThanAnyUplinksRoundTripWasRefusedHere(
        opened: Bool, took: Duration, outcome: ConnectCheck.Outcome
    ) {
        #expect(ConnectCheck.outcome(opened: opened, took: took) == outcome)
    }

    @Test func attemptsAfterARefusalHereAreHalfASecondApart() {
        #expect(ReturnWatch.spacing(after: .refusedHere, every: .seconds(2)) == .milliseconds(500))
        #expect(ReturnWatch.spacing(after: .refusedHere, every: .milliseconds(200)) == .milliseconds(200))
        #expect(ReturnWatch.spacing(after: .failed, every: .seconds(2)) == .seconds(2))
    }

    /// What an attempt costs where a plan bills it: an answer on this side of the uplink nothing
    /// (a connection on this host opens, then is refused); an attempt that crossed it, its handshake
    /// and teardown or its SYNs, billed to the destination's meter.
    @Test func onlyWhatCrossedTheLinkIsBilled() async throws {
        #expect(ConnectCheck.crossedTheLink(.opened) && ConnectCheck.crossedTheLink(.failed))
        #expect(!ConnectCheck.crossedTheLink(.openedHere) && !ConnectCheck.crossedTheLink(.refusedHere))
        let meter = WireMeter()
        let listener = try TestTCPListener(name: "connect-check") { _, _ in }
        defer { listener.stop() }
        var settings = Configuration.DestinationSettings()
        settings.url = "http://127.0.0.1:\(listener.port)/"
        settings.probeConnectSeconds = 2
        let check = try #require(ConnectCheck(settings: settings, meter: meter))
        #expect(await check.attempt() == .openedHere)
        #expect(meter.take() == 0, "a handshake on this host crossed no link")
        listener.stop()
        #expect(await check.attempt() == .refusedHere)
        #expect(meter.take() == 0, "a refusal on this host crossed no link")
    }

    /// A path that accepts connections and never answers (a middlebox): the first connection
    /// brings one probe forward; then the probes' own spacing holds.
    @Test func aPathThatTakesConnectionsButNeverAnswersIsNotProbedMoreForIt() async throws {
        try await withBrokenLink(.blackHole, connectSeconds: 0.2, connectTimeoutSeconds: 0.5, requestTimeoutSeconds: 1)
        { _, proxy, _ in
            let deadline = ContinuousClock.now + .seconds(20)
            while proxy.counters.probesWhileDown < 1, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(proxy.counters.probesWhileDown == 1, "the probe the first connection brought forward")
            let connections = proxy.counters.connections
            // The scenario itself: seconds in which attempts every 0.2 s would show.
            try await Task.sleep(for: .seconds(3))
            #expect(proxy.counters.probesWhileDown == 1, "\(proxy.counters.probesWhileDown) probes")
            #expect(
                proxy.counters.connections <= connections + 1,
                "\(proxy.counters.connections - connections) connections after the probe")
        }
    }

    /// A clock each reading of which is 50 ms after the last: a connection made on loopback looks
    /// as if its handshake crossed a link.
    final class SlowLink: RelayClock {
        private let ns = Mutex<UInt64>(1_000_000_000)
        func nowMs() -> Int64 { Int64(monotonicNs() / 1_000_000) }
        func monotonicNs() -> UInt64 {
            ns.withLock {
                $0 += 50_000_000
                return $0
            }
        }
        func sleep(untilNs deadlineNs: UInt64) async {}
        func bootID() -> String? { nil }
    }

    /// The connection that saw the link's return is kept for the round (`SpareConnection`), its
    /// handshake billed as having crossed the link, and everything after it, its teardown too, by
    /// the destination's meter; taken once, and not once it is stale.
    @Test func theConnectionThatSawTheLinksReturnIsKeptForTheRound() async throws {
        let (listener, port) = try IPv4Socket.bind(
            type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 4)
        defer { try? listener.close() }
        var settings = Configuration.DestinationSettings()
        settings.url = "http://127.0.0.1:\(port)/"
        settings.probeConnectSeconds = 1
        #expect(SpareConnection.worthKeeping(for: settings))
        let meter = WireMeter()
        let spare = SpareConnection()
        let clock = SlowLink()
        let check = try #require(ConnectCheck(settings: settings, meter: meter, spare: spare, clock: clock))
        #expect(await check.attempt() == .opened)
        let handshake = meter.total
        #expect(handshake >= 3 * 52, "the handshake crossed the link and is billed: \(handshake) B")
        var kept = try #require(spare.take(now: clock.now()), "the connection is kept for the round")
        #expect(spare.take(now: clock.now()) == nil, "and taken once")
        let server = accept(listener.number, nil, nil)
        defer { close(server) }
        let sent = try [UInt8](repeating: 7, count: 100).withUnsafeBytes { try kept.send($0) }
        #expect(sent == 100)
        var buffer = [UInt8](repeating: 0, count: 200)
        #expect(buffer.withUnsafeMutableBytes { recv(server, $0.baseAddress, $0.count, 0) } == 100)
        meter.sampleLive()
        let afterSend = meter.total
        #expect(afterSend >= handshake + 100, "its bytes are the destination's: \(afterSend - handshake) B")
        kept = try CurlConnection(url: "telnet://127.0.0.1:\(port)") // the kept one closes
        #expect(
            (afterSend + 4 * 52...afterSend + 6 * 52).contains(meter.total),
            "its teardown is the destination's too: \(meter.total - afterSend) B")

        spare.put(kept, openedAt: clock.now())
        #expect(spare.take(now: clock.now() + SpareConnection.freshFor) == nil, "stale: the round opens its own")
        settings.url = "https://127.0.0.1:\(port)/"
        #expect(!SpareConnection.worthKeeping(for: settings), "the check does no TLS handshake")
        settings.url = "http://127.0.0.1:\(port)/"
        settings.probeURL = "http://127.0.0.1:\(port)/health"
        #expect(!SpareConnection.worthKeeping(for: settings), "the check connects to the probe's host")
    }
}

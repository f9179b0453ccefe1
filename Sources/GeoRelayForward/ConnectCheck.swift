import Dispatch
import GeoRelayCore

/// Whether a bare TCP connection to the destination opens: a look at a link that is down which
/// costs nothing billable there (a SYN that gets no answer is not carried), and about 360 bytes
/// (the handshake and the teardown) once the link is back.
///
/// `DestinationLink` tries one every `probe.connectSeconds` (2 s) between its probes: only a
/// connection that opens is followed by the probe itself, so the link's return is noticed
/// within a couple of seconds instead of at the next probe (every 15 s). A connection proves
/// nothing about the server (a middlebox may accept it), which is why the probe still decides.
///
/// libcurl connects (`CURLOPT_CONNECT_ONLY` on a `telnet://` URL, whose handler does nothing at
/// connect time: no TLS handshake, no bytes), so name lookups, the socket's bill and the connect
/// timeout are the same as every other connection's.
package final class ConnectCheck: Sendable {
    private let target: String
    private let timeoutSeconds: Double
    /// Where what crossed the link is billed: the destination's meter.
    private let meter: WireMeter?
    /// Each attempt's own count, moved to `meter` unless nothing crossed the link.
    private let attemptMeter: WireMeter?
    private let queue: DispatchQueue
    /// What an attempt is timed on: quicker than `answeredHere`, it never crossed the link.
    private let clock: any RelayClock
    /// Where a connection opened across the link is kept for the round; nil: each is closed.
    private let spare: SpareConnection?

    /// How an attempt ended.
    package enum Outcome: Sendable, Equatable {
        /// Opened across the link: a handshake that took a round trip.
        case opened
        /// Opened quicker than any uplink's round trip: by this host, a server beside it, or a
        /// terminal's TCP accelerator answering on board whether or not its satellite is there.
        /// It says nothing of the far side, and nothing crossed the link: nothing is billed.
        case openedHere
        /// Refused quicker than any uplink's round trip: by this host or the terminal's router
        /// while its link is down. Nothing crossed the link, and nothing is billed.
        case refusedHere
        /// Timed out, or refused from beyond the link (the server's host up, its port closed).
        case failed
    }

    /// Quicker than any uplink's round trip (a low-orbit or cellular link's is 25 ms or more): an
    /// attempt answered within it, either way, never crossed one.
    static let answeredHere = Duration.milliseconds(10)

    package static func outcome(opened: Bool, took: Duration) -> Outcome {
        let here = took < answeredHere
        return opened ? (here ? .openedHere : .opened) : here ? .refusedHere : .failed
    }

    /// Whether an attempt's bytes crossed the uplink, to be billed: not when this side answered.
    static func crossedTheLink(_ outcome: Outcome) -> Bool {
        outcome == .opened || outcome == .failed
    }

    /// nil when the URL is not one a bare connection can stand for (credentials in it, a scheme
    /// other than http(s), tcp or tls): the probes alone watch the link then.
    /// - Parameter spare: where a connection opened across the link is kept for the round that
    ///   follows; only where it is the destination's own (a plain URL, no `probe.url`).
    init?(
        settings: Configuration.DestinationSettings, meter: WireMeter?, spare: SpareConnection? = nil,
        clock: any RelayClock = SystemClock()
    ) {
        guard settings.probeConnectSeconds > 0, let target = Self.target(for: settings.probeURL ?? settings.url) else {
            return nil
        }
        self.target = target
        // A connection that has not opened by the next attempt is as good as refused.
        // (At least 0.1 s: curl reads a 0 ms timeout as its default of 300 s.)
        timeoutSeconds = max(0.1, min(settings.probeConnectSeconds, settings.connectTimeoutSeconds))
        self.meter = meter
        self.clock = clock
        attemptMeter = meter == nil ? nil : WireMeter(clock: clock)
        self.spare = spare
        queue = DispatchQueue(label: "georelay.connect.\(settings.name)")
    }

    /// `telnet://host:port` for the host and port `url` connects to.
    static func target(for url: String) -> String? {
        let lowered = url.lowercased()
        if lowered.hasPrefix("tcp://") || lowered.hasPrefix("tls://") {
            guard let endpoint = try? TeltonikaSession.Endpoint.curlURL(url),
                let scheme = endpoint.firstRange(of: "://")
            else { return nil }
            return "telnet" + endpoint[scheme.lowerBound...]
        }
        guard let parsed = try? HTTP1Target(url: url) else { return nil }
        return "telnet://\(parsed.host):\(parsed.port)"
    }

    /// Tries once, off the cooperative pool (connecting blocks for up to the timeout).
    func attempt() async -> Outcome {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: self.attemptOnce()) }
        }
    }

    /// One attempt, blocking. A connection kept for the round is the spare's alone when this
    /// returns: the round may take it at once, and its last release closes it where it was used.
    private func attemptOnce() -> Outcome {
        let started = clock.now()
        var connection = try? CurlConnection(
            url: target, connectTimeoutSeconds: timeoutSeconds, meter: attemptMeter, clock: clock)
        let opened = (try? connection?.connect()) != nil
        let outcome = Self.outcome(opened: opened, took: started.duration(to: clock.now()))
        if outcome == .opened, let spare, let kept = connection {
            // Kept for the round: billed so far here, from now on by the destination's meter.
            attemptMeter?.sample(kept.descriptor)
            if let attemptMeter, let meter {
                meter.bill(attemptMeter.take())
                attemptMeter.handOver(kept.descriptor, to: meter)
            }
            spare.put(kept, openedAt: clock.now())
            return outcome
        }
        // Closed before the outcome is billed: the socket's last counts come at its close.
        connection = nil
        if let attemptMeter {
            let bytes = attemptMeter.take()
            if Self.crossedTheLink(outcome) { meter?.bill(bytes) }
        }
        return outcome
    }
}

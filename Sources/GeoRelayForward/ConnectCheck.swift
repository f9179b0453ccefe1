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
final class ConnectCheck: Sendable {
    private let target: String
    private let timeoutSeconds: Double
    private let meter: WireMeter?
    private let queue: DispatchQueue

    /// nil when the URL is not one a bare connection can stand for (credentials in it, a scheme
    /// other than http(s), tcp or tls): the probes alone watch the link then.
    init?(settings: Configuration.DestinationSettings, meter: WireMeter?) {
        guard settings.probeConnectSeconds > 0, let target = Self.target(for: settings.probeURL ?? settings.url) else {
            return nil
        }
        self.target = target
        // A connection that has not opened by the next attempt is as good as refused.
        // (At least 0.1 s: curl reads a 0 ms timeout as its default of 300 s.)
        timeoutSeconds = max(0.1, min(settings.probeConnectSeconds, settings.connectTimeoutSeconds))
        self.meter = meter
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
    func opens() async -> Bool {
        let (target, timeout, meter) = (self.target, timeoutSeconds, self.meter)
        return await withCheckedContinuation { continuation in
            queue.async {
                guard let connection = try? CurlConnection(url: target, connectTimeoutSeconds: timeout, meter: meter)
                else {
                    continuation.resume(returning: false)
                    return
                }
                let opened = (try? connection.connect()) != nil
                continuation.resume(returning: opened)
            }
        }
    }
}

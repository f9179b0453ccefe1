import GeoRelayCore
import GeoRelaySpool

/// A destination's delivery loop, whatever its protocol.
package protocol DestinationForwarder: Sendable {
    /// Runs until the task is cancelled.
    func run() async
}

/// What every destination does when it cannot deliver: back off with jitter,
/// probe cheaply instead of resending payloads, and tell the spool its state
/// so `georelay status` can show it.
package final class DestinationLink: Sendable {
    let settings: Configuration.DestinationSettings
    private let spool: Spool
    private let logger: Logger
    private let prober: HTTPWorker

    package init(settings: Configuration.DestinationSettings, spool: Spool, logger: Logger) throws {
        self.settings = settings
        self.spool = spool
        self.logger = logger
        self.prober = try HTTPWorker(label: "georelay.probe.\(settings.name)", tls: settings.tls)
    }

    /// Waits out a failure. Returns true when a probe says the destination is reachable again.
    package func backOff(reason: String, retryAfter: Double?, transport: Bool, backoff: inout Backoff) async -> Bool {
        var delay = max(backoff.nextDelay(), retryAfter ?? 0)
        logger.warning("unavailable (\(reason)); next attempt in \(Int(delay.rounded())) s")
        while !Task.isCancelled {
            let nextAttempt = WallClock.nowMs() + Int64(delay * 1000)
            recordState(.backoff, error: reason, nextAttemptMs: nextAttempt)
            // After a transport failure a probe every `probe.intervalSeconds` notices the link's return
            // early; after an HTTP error the server was reachable, so the full delay is waited.
            let step = transport ? min(delay, settings.probeIntervalSeconds) : delay
            var waited = 0.0
            while waited < delay, !Task.isCancelled {
                let slice = min(step, delay - waited)
                try? await Task.sleep(for: .milliseconds(Int(slice * 1000)))
                waited += slice
                if !transport { break }
                if waited < delay, await probe() {
                    return true
                }
            }
            if Task.isCancelled { return false }
            recordState(.probing, error: reason, nextAttemptMs: nil)
            if await probe() { return true }
            delay = backoff.nextDelay()
        }
        return false
    }

    /// A cheap check that the destination is back: GET `probe.url` (2xx and
    /// not an HTML page), or an empty request to the destination itself
    /// (`ServerCheck`: any answer from the server, not a portal). Not a TCP
    /// connect: a black-holing middlebox or a captive portal accepts those, and
    /// then every probe would be followed by a payload that cannot arrive.
    package func probe() async -> Bool {
        let request = ServerCheck.request(url: settings.probeURL ?? settings.url, connectTimeoutSeconds: settings.connectTimeoutSeconds)
        let result = await prober.perform(request)
        if case .success(let response) = result {
            var update = DeliveryUpdate(destination: settings.name)
            update.wireBytes = response.wireBytes
            spool.record(update)
        }
        guard settings.probeURL != nil else { return ServerCheck.provesServer(result) }
        guard case .success(let response) = result else { return false }
        return (200..<300).contains(response.status) && !TraccarProtocol.looksLikeHTML(response)
    }

    package func recordState(_ state: DestinationState, error: String?, nextAttemptMs: Int64?) {
        var update = DeliveryUpdate(destination: settings.name)
        update.state = .init(state: state, lastError: error, nextAttemptMs: nextAttemptMs)
        spool.record(update)
    }
}

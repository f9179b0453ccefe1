import GeoRelayCore
import GeoRelaySpool
import Glibc

/// Takes the status page's chart samples: every `interval`, each destination's backlog and wire
/// bytes, handed to the spool's writer as held state.
///
/// Held state is written with the acknowledgements and counters the relay writes anyway (every
/// `spool.stateSyncSeconds`), so a sample adds rows to a commit, not a commit (flash wear); a
/// crash can cost the last few samples, which a chart does not miss. Runs only while the page
/// is served (`ui.listen`): the samples are read from the spool as `status` reads it.
package struct ChartSampler: Sendable {
    /// 288 samples a day: a point per 5 minutes on a 24-hour chart a phone shows in 390 px.
    package static let interval: Duration = .seconds(300)

    package var spool: Spool
    package var logger: Logger

    package init(spool: Spool, logger: Logger) {
        self.spool = spool
        self.logger = logger
    }

    /// Samples at once (a chart opened after a restart has its newest point), then every
    /// `interval` until cancelled, on the spool's clock (the relay's).
    package func run() async {
        var failed = false
        let spool = self.spool
        while !Task.isCancelled {
            let result: Result<[ChartSample], any Error> = await onDedicatedThread(named: "georelay.chart") {
                Result { try Self.samples(reader: spool.makeReader(), nowMs: spool.clock.nowMs()) }
            }
            switch result {
            case .success(let samples):
                spool.record(chartSamples: samples)
                failed = false
            case .failure(let error):
                // Once per run of failures: a chart with a gap is not worth a log line every 5 minutes.
                if !failed { logger.warning("status page chart: cannot read the spool for a sample: \(error)") }
                failed = true
            }
            await spool.clock.sleep(for: Self.interval)
        }
    }

    /// One sample per destination the spool knows, as `status` would show it now.
    package static func samples(reader: SpoolReader, nowMs: Int64) throws -> [ChartSample] {
        try reader.status(nowMs: nowMs).destinations.map {
            ChartSample(destination: $0.name, timeMs: nowMs, pending: $0.pending, wireBytes: $0.wireBytes)
        }
    }
}

import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit

@testable import GeoRelayForward

/// A spool in a temporary directory and one destination registered in it, in one process: what
/// each forwarder fixture (Traccar over OsmAnd or Teltonika, push) builds around its fake server.
class SpoolFixture: @unchecked Sendable {
    let directory: TemporaryDirectory
    let spool: Spool
    var settings: Configuration.DestinationSettings
    /// The forwarder's log, at debug level: what a failed wait shows (`log.tail()`).
    let log = CapturedLog()

    /// - Parameter settings: the destination as the fixture points it at its server; the test
    ///   timings are applied, then `configure`.
    ///   - stateInterval: how long the spool holds acknowledgements and parks before it commits them:
    ///     the relay's default, so the forwarder is tested deciding from its ledger, not from commits.
    init(
        settings: Configuration.DestinationSettings, stateInterval: Duration = .seconds(15),
        configure: (inout Configuration.DestinationSettings) -> Void
    ) async throws {
        directory = try TemporaryDirectory()
        var spoolSettings = Spool.Settings(path: directory.file("spool.db"))
        spoolSettings.stateInterval = stateInterval
        spool = try Spool(settings: spoolSettings)
        self.settings = settings
        self.settings.useTestTimings()
        configure(&self.settings)
        try await spool.register(destinations: [
            DestinationRegistration(name: self.settings.name, buffered: self.settings.buffer)
        ])
    }

    /// Waits for the spool's view of the destination to satisfy `condition`. The default bound is
    /// generous: under `make test` the CPU-bound suites can hold the test process's two pool
    /// threads for most of a minute, and the forwarders' tasks wait with everything else.
    @discardableResult
    func waitForStatus(timeout: Duration = .seconds(60), _ condition: (SpoolStatus.Destination) -> Bool) async throws
        -> SpoolStatus.Destination
    {
        try await destinationStatus(spool, settings.name, timeout: timeout, condition)
    }

    deinit {
        spool.close()
    }
}

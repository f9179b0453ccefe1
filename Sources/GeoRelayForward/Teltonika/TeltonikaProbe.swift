import Dispatch
import GeoRelayCore

/// The Teltonika destination's probe: a connection of its own that identifies as
/// ``uniqueID`` and waits for the 1-byte answer.
///
/// `DestinationLink` probes HTTP destinations with an empty GET, which a Teltonika port
/// cannot answer. Traccar answers every identification, `0x01` for a device it knows and
/// `0x00` for one it does not, so either byte proves the server is there and reading
/// (`.server`); any other byte shows something else listens (`.path`); a refused or reset
/// connection, or no answer within twice the connect timeout, is `.nothing`. The engine's
/// canary, before it quarantines a position, identifies the same way.
///
/// 16 bytes up and 1 down, and no position: nothing is stored. A Traccar server with
/// `database.registerUnknown` on creates a device of this id the first time it is probed.
package final class TeltonikaProbe: Sendable {
    /// The id probes identify as: no device of the relay's is expected to carry it. 14 characters,
    /// so the identification (16 bytes) is long enough for Traccar to answer it alone.
    package static let uniqueID = "georelay-probe"
    /// Its identification: the id's length in two bytes, then the id (`TeltonikaCodec.identification`).
    static let identification: [UInt8] = [0, UInt8(uniqueID.utf8.count)] + Array(uniqueID.utf8)

    private let endpoint: TeltonikaSession.Endpoint
    private let timeout: Duration
    private let queue: DispatchQueue

    init(settings: Configuration.DestinationSettings, meter: WireMeter? = nil, clock: any RelayClock = SystemClock())
        throws(CurlError)
    {
        endpoint = try TeltonikaSession.Endpoint(settings: settings, meter: meter, clock: clock)
        timeout = settings.probeTimeout
        queue = DispatchQueue(label: "georelay.probe.\(settings.name)")
    }

    /// Probes once, off the cooperative pool (connecting blocks); cancelling the task ends the
    /// wait for the answer within a quarter of a second.
    /// - Parameter timeout: how long the answer may take (default twice the connect timeout).
    func check(timeout: Duration? = nil) async -> (answer: ServerCheck.Answer, wireBytes: Int) {
        let abort = AbortFlag()
        let timeout = timeout ?? self.timeout
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                queue.async { continuation.resume(returning: self.run(timeout: timeout, abort: abort)) }
            }
        } onCancel: {
            abort.set()
        }
    }

    private func run(timeout: Duration, abort: AbortFlag) -> (answer: ServerCheck.Answer, wireBytes: Int) {
        guard let session = try? TeltonikaSession(uniqueID: Self.uniqueID, endpoint: endpoint),
            (try? session.connect()) != nil
        else { return (.nothing, 0) }
        let event = session.identify() ?? session.nextEvent(before: endpoint.clock.now() + timeout, abort: abort)
        session.close()
        return (Self.answer(event), session.takeWireBytes())
    }

    /// What the first event after the identification says of the destination: either answer byte
    /// proves Traccar; other bytes, something else listening; nothing, nothing.
    static func answer(_ event: TeltonikaExchange.Event?) -> ServerCheck.Answer {
        switch event {
        case .identified?: .server
        case .broken(.notTraccar)?: .path
        default: .nothing
        }
    }
}

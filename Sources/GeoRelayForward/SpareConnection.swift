import GeoRelayCore
import Synchronization

/// The connection a bare connection attempt opened across the link (`ConnectCheck`), kept for
/// the round that follows: the link's return costs one handshake, not two. On a geostationary
/// link that is 600 ms before the first position, and the check's teardown (four segments)
/// is not sent.
///
/// Taken by a Traccar round's first connection (`RoundDriver`) or a push batch's
/// (`PushRound`, on the same driver). Only for a plain destination (`http://`, `tcp://`) that the check
/// connects to itself (no
/// `probe.url`): its connection is what a round would open. One taken later than `freshFor`
/// after it opened, or closed by the server meanwhile, is dropped: the round opens its own.
package final class SpareConnection: Sendable {
    /// A connection handed from the check's queue to the engine's thread: one thread uses it at a
    /// time (the check puts it and lets go of it; the engine takes it), as `CurlConnection` asks.
    private struct Handed: @unchecked Sendable {
        let connection: CurlConnection
        let openedAt: RelayInstant
    }

    /// Longer than a probe and its answer, which may come between the check and the round.
    static let freshFor: Duration = .seconds(10)

    private let slot = Mutex<Handed?>(nil)

    /// Whether the check's connection is one a round would open: the destination's own host and
    /// port, without TLS (the check does no handshake).
    static func worthKeeping(for settings: Configuration.DestinationSettings) -> Bool {
        let url = settings.url.lowercased()
        return settings.probeURL == nil && settings.probeConnectSeconds > 0
            && (url.hasPrefix("http://") || url.hasPrefix("tcp://"))
    }

    /// Keeps `connection` (opened at `openedAt`) for the next round; one kept before is dropped.
    func put(_ connection: CurlConnection, openedAt: RelayInstant) {
        let handed = Handed(connection: connection, openedAt: openedAt)
        slot.withLock { $0 = handed }
    }

    /// The kept connection if it opened less than `freshFor` before `now` and the server has
    /// not closed it (nor sent what nobody asked for); it is the caller's.
    func take(now: RelayInstant) -> CurlConnection? {
        guard
            let handed = slot.withLock({ slot -> Handed? in
                defer { slot = nil }
                return slot
            }), now < handed.openedAt + Self.freshFor,
            let quiet = try? handed.connection.wait(readable: true, writable: false, timeout: .zero), !quiet.readable
        else { return nil }
        return handed.connection
    }

    /// Drops the kept connection (the route moved: it runs over the uplink the traffic left).
    func drop() {
        slot.withLock { $0 = nil }
    }
}

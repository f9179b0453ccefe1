import Foundation
import GeoRelayCore
import GeoRelayForward
import Synchronization

/// A whole relay's delivery on simulated time: its destinations' loops, rounds, probes and
/// spool all sleep on one `SimulatedClock`, their connections cross one `SimulatedNetwork`, and
/// the test moves the clock from one thing that happens to the next (a sleeper's deadline, a
/// segment's arrival), each time the relay has done all it can without time passing.
///
/// The relay has done all it can when every destination is between rounds or its round's driver is
/// parked on the clock with nothing to read or write, every task the clock woke has run, and the
/// parts asleep on the clock and the bytes on the link have not changed over a few looks. Hours of a satellite link's outages and
/// drains take seconds.
package final class SimulatedWorld: Sendable {
    package let clock: SimulatedClock
    package let network: SimulatedNetwork
    private let watched = Mutex<[(link: DestinationLink, driver: SimulatedConnector, ended: AbortFlag)]>([])

    /// - Parameter wallMs: where the wall clock starts.
    package init(link: LinkProfile, wallMs: Int64 = 1_784_953_800_000) {
        clock = SimulatedClock(wallMs: wallMs)
        network = SimulatedNetwork(clock: clock, link: link, time: .movedByTest)
    }

    /// A destination whose rounds run on `driver`: the world waits for it until `ended` is set
    /// (its forwarder returned).
    package func watch(_ link: DestinationLink, driver: SimulatedConnector, ended: AbortFlag) {
        watched.withLock { $0.append((link, driver, ended)) }
    }

    /// Every destination waiting only for time: in a wait of its loop's (an idle wait, a backoff,
    /// a check whose thread is parked), or in a round whose driver is parked with nothing to do or
    /// that waits for a check of its own, parked (a login).
    private var destinationsWait: Bool {
        network.checksWait
            && watched.withLock {
                $0.allSatisfy {
                    $0.ended.isSet
                        || ($0.link.roundUnderWay
                            ? $0.driver.isParked || $0.driver.checksParked : $0.link.waiting.now)
                }
            }
    }

    /// What changes whenever a part of the relay moves: its waits' entries and exits.
    private var movements: Int { watched.withLock { $0.reduce(0) { $0 + $1.link.waiting.changes } } }

    /// Waits until the relay has done all it can without time passing. Bounded by looks, not by an
    /// assumed rate: it fails after 50,000 (ten seconds or more), saying what it waited for.
    package func settle(_ what: @autoclosure () -> String) async throws {
        var last: (sleeping: Int, movements: Int, counters: SimulatedNetwork.Counters)?
        var steady = 0
        for _ in 0..<50_000 {
            network.deliverDue()
            let now = (sleeping: clock.sleeping, movements: movements, counters: network.counters)
            if destinationsWait, clock.resuming == 0, let last, last.sleeping == now.sleeping,
                last.movements == now.movements,
                last.counters == now.counters
            {
                steady += 1
                if steady >= 3 { return }
            } else {
                steady = 0
            }
            last = now
            try await Task.sleep(for: .microseconds(100))
        }
        throw SimulatedWorldError(
            "the relay did not settle \(what()) within 50,000 looks: \(clock.sleeping) parts asleep on the clock, \(clock.resuming) woken and not yet run, destinations waiting: \(destinationsWait)"
        )
    }

    /// Moves the clock from one thing that happens to the next until `condition` holds, for at most
    /// `limit` of simulated time. - Returns: whether it held.
    @discardableResult
    package func run(for limit: Duration, until condition: () async throws -> Bool = { false }) async throws -> Bool {
        let end = clock.now() + limit
        while true {
            try await settle("at \(clock.now().sinceOrigin)")
            if try await condition() { return true }
            let now = clock.now()
            guard now < end else { return false }
            let next = clock.nextDeadlineNs.map { RelayInstant(sinceOrigin: .nanoseconds(Int64(clamping: $0))) }
            clock.advance(by: min(end, max(next ?? end, now)) - now)
        }
    }

    /// Moves the clock `duration` ahead, through everything that happens meanwhile.
    package func advance(by duration: Duration) async throws {
        try await run(for: duration)
    }
}

package struct SimulatedWorldError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

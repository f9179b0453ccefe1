import GeoRelayCore
import Synchronization

/// What the forwarders may send now, uplink by uplink: the one place a spent budget reaches
/// them (issue 15). The uplink monitor sets it at each look; each forwarder asks it before a
/// round and is woken when it changes.
///
/// A destination whose traffic takes an uplink with a spent budget is *restricted*: it sends
/// alarms, and per device at most one position per `send.minIntervalSeconds` (its newest, so
/// the server shows where the vessel is now), ahead of the backlog as an alarm goes. Nothing
/// is settled or dropped: the backlog waits, whole, for the period to roll over or for a
/// cheaper uplink to take the route, and then goes as history.
package final class UplinkGate: Sendable {
    package struct Restriction: Sendable, Equatable {
        /// The uplink whose budget is spent.
        package var uplink: String
        /// At most one position per device this often (device time, against the newest fix
        /// the server has of it).
        package var minIntervalMs: Int64
        /// For the crew: which budget, how much of it, until when.
        package var reason: String

        package init(uplink: String, minIntervalMs: Int64, reason: String) {
            self.uplink = uplink
            self.minIntervalMs = minIntervalMs
            self.reason = reason
        }
    }

    private struct State {
        var restrictions: [String: Restriction] = [:]
        var watchers: [WakeSignal] = []
    }
    private let state = Mutex(State())

    package init() {}

    /// The destination's restriction now; nil: it sends as its own filter says.
    package func restriction(for destination: String) -> Restriction? {
        state.withLock { $0.restrictions[destination] }
    }

    /// Every destination's restriction, replacing the last; watchers are woken when anything changed.
    package func set(_ restrictions: [String: Restriction]) {
        let woken: [WakeSignal] = state.withLock { state in
            guard state.restrictions != restrictions else { return [] }
            state.restrictions = restrictions
            return state.watchers
        }
        for watcher in woken { watcher.signal() }
    }

    /// `signal` is signalled at every change (a forwarder's own wake-up, so a restriction lifted
    /// while it waits starts the backlog at once, and one set during a round ends the round).
    package func watch(_ signal: WakeSignal) {
        state.withLock { $0.watchers.append(signal) }
    }

    package func unwatch(_ signal: WakeSignal) {
        state.withLock { $0.watchers.removeAll { $0 === signal } }
    }
}

import GeoRelayCore
import Synchronization

/// What the forwarders may send now, uplink by uplink: the one place a spent budget reaches
/// them. The uplink monitor sets it at each look; each forwarder asks it before a
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
        /// Alarms per device and hour that still go (`send.maxAlarmsPerDeviceHour`).
        package var maxAlarmsPerDeviceHour: Int

        package init(uplink: String, minIntervalMs: Int64, reason: String, maxAlarmsPerDeviceHour: Int = 12) {
            self.uplink = uplink
            self.minIntervalMs = minIntervalMs
            self.reason = reason
            self.maxAlarmsPerDeviceHour = maxAlarmsPerDeviceHour
        }
    }

    /// What a destination on a budgeted uplink may still spend: the forwarders spend it as their
    /// answers come back, so a budget runs out at the answer that spends it, not at the
    /// monitor's next look (up to 5 s later, a pipelined round behind 9.6 kbit/s meanwhile).
    package struct Allowance: Sendable, Equatable {
        package var uplink: String
        /// Left on the uplink's budget (the lesser of day and month) as of the last look.
        package var bytesLeft: Int64
        /// The restriction every destination on the uplink gets once it is spent.
        package var whenSpent: Restriction

        package init(uplink: String, bytesLeft: Int64, whenSpent: Restriction) {
            self.uplink = uplink
            self.bytesLeft = bytesLeft
            self.whenSpent = whenSpent
        }
    }

    private struct State {
        var restrictions: [String: Restriction] = [:]
        var allowances: [String: Allowance] = [:]
        /// Per uplink, bytes left: shared by every destination it carries.
        var left: [String: Int64] = [:]
        /// Per destination, the route its traffic takes (as the monitor last saw it) and how many
        /// times it has moved: a forwarder that sees a new generation opens new connections.
        var routes: [String: String] = [:]
        var routeGenerations: [String: Int] = [:]
        var watchers: [WakeSignal] = []
        /// Whether the monitor has looked once, and who waits for that.
        var looked = false
        var firstLookWaiters: [WakeSignal] = []
    }
    private let state = Mutex(State())

    /// The kernel's announcements of route, address and link changes (nil where they cannot be
    /// heard): a forwarder waiting for its destination to come back tries to connect at each.
    package let linkChanges: WakeBroadcast?

    /// - Parameter awaitsFirstLook: uplinks are configured, so budgets may apply: forwarders wait
    ///   for the monitor's first look (`firstLook`) before they send anything.
    package init(linkChanges: WakeBroadcast? = nil, awaitsFirstLook: Bool = false) {
        self.linkChanges = linkChanges
        state.withLock { $0.looked = !awaitsFirstLook }
    }

    /// Returns once the monitor has looked at the uplinks (at most `timeout`): before it, a
    /// destination on a spent budget would look unrestricted, and a forwarder starting with a
    /// backlog would send a round the budget does not have.
    package func firstLook(timeout: Duration = .seconds(10), clock: any RelayClock) async {
        let signal = WakeSignal()
        let looked = state.withLock { state -> Bool in
            if !state.looked { state.firstLookWaiters.append(signal) }
            return state.looked
        }
        if !looked { await signal.wait(timeout: timeout, clock: clock) }
    }

    /// The destination's restriction now; nil: it sends as its own filter says.
    package func restriction(for destination: String) -> Restriction? {
        state.withLock { $0.restrictions[destination] }
    }

    /// Every destination's restriction and allowance, replacing the last (the monitor's look, from
    /// its totals, which include what was spent since); watchers are woken when a restriction changed.
    ///
    /// - Parameter routes: per destination, the route its traffic takes now (an uplink's name, or
    ///   how else it leaves); a destination whose route moved gets a new generation, and its
    ///   forwarder is woken to move its connections (``routeGeneration(for:)``).
    package func set(
        _ restrictions: [String: Restriction], allowances: [String: Allowance] = [:], routes: [String: String]? = nil
    ) {
        let woken: [WakeSignal] = state.withLock { state in
            if !state.looked {
                state.looked = true
                for waiter in state.firstLookWaiters { waiter.signal() }
                state.firstLookWaiters = []
            }
            state.allowances = allowances
            state.left = [:]
            for allowance in allowances.values { state.left[allowance.uplink] = allowance.bytesLeft }
            var moved = false
            if let routes {
                for (destination, route) in routes where state.routes[destination].map({ $0 != route }) ?? false {
                    state.routeGenerations[destination, default: 0] += 1
                    moved = true
                }
                state.routes = routes
            }
            guard state.restrictions != restrictions || moved else { return [] }
            state.restrictions = restrictions
            return state.watchers
        }
        for watcher in woken { watcher.signal() }
    }

    /// How many times the route of `destination`'s traffic has moved since the relay started. A
    /// kept-alive connection keeps the source address of the route it was opened on, so after a
    /// move the server's answers would still come back over the old (metered) uplink: a forwarder
    /// seeing a new generation lets its answers in flight come back, then opens new connections.
    package func routeGeneration(for destination: String) -> Int {
        state.withLock { $0.routeGenerations[destination] ?? 0 }
    }

    /// What is left of the budget of the uplink carrying `destination`; nil when that uplink has
    /// no budget (or the destination is not on one).
    package func bytesLeft(for destination: String) -> Int64? {
        state.withLock { state in state.allowances[destination].flatMap { state.left[$0.uplink] } }
    }

    /// A destination's answer cost `bytes` on the wire. When that spends its uplink's allowance,
    /// every destination on the uplink is restricted at once and the watchers are woken (a round
    /// on the wire ends early, as for an alarm).
    package func spend(_ bytes: Int, destination: String) {
        guard bytes > 0 else { return }
        let woken: [WakeSignal] = state.withLock { state in
            guard let allowance = state.allowances[destination], let left = state.left[allowance.uplink] else {
                return []
            }
            let now = left - Int64(bytes)
            state.left[allowance.uplink] = now
            guard now <= 0, left > 0 else { return [] }
            for (name, other) in state.allowances where other.uplink == allowance.uplink {
                state.restrictions[name] = other.whenSpent
            }
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

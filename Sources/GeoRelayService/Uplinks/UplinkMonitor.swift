import FoundationEssentials
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import Glibc
import Synchronization

/// Follows which uplink carries each destination's traffic, and counts the wire bytes each
/// uplink carried per UTC day: what budgets are measured against.
///
/// Every `interval`, and at once when the kernel announces a link or route change
/// (`RouteWatch`), it asks the kernel for each destination's route (`UplinkRoute`: nothing is
/// sent) and takes the wire bytes each destination recorded since the last look
/// (`Spool.wireBytesRecorded`, counted as recorded, not as committed). Those bytes went over
/// the route of the last look, or of this one when the last had none; a switch between two
/// looks puts at most one interval's bytes on the wrong uplink. Usage is held state in the
/// spool (no commit of its own, flash wear), so a crash can cost its last 15 s.
///
/// It also keeps each uplink's totals for the UTC day and month (read from the spool at the
/// first look, then counted here) and, from them, tells the `UplinkGate` which destinations
/// ride an uplink whose budget is spent. A budget can be overrun by what went between two
/// looks (at most `interval` of traffic, plus the requests in flight when it is seen spent).
/// Runs only with `uplinks` configured.
package final class UplinkMonitor: Sendable {
    /// A route is cheap to ask for (a few system calls), so often enough that a switch between
    /// Starlink and a satellite terminal is seen within seconds.
    package static let interval: Duration = .seconds(5)

    private let spool: Spool
    private let configuration: @Sendable () -> Configuration
    private let logger: Logger
    private let routeWatch: RouteWatch?
    private struct State {
        var routes: [String: UplinkRoute.Answer] = [:]
        var counted: [String: Int64] = [:]
        /// Per uplink counted by its interface (`count: "interface"`), the counters at the last look.
        var interfaceBytes: [String: Int64] = [:]
        /// Per uplink, the bytes of `day` and of its month; nil until read from the spool.
        var usage: [String: (today: Int64, month: Int64)]?
        var day = ""
    }
    private let state = Mutex(State())
    /// Names are resolved once per `AddressCache.keep`, not at every look: a lookup over a
    /// metered uplink every 5 s would cost more than the positions.
    private let addresses: AddressCache
    private let gate: UplinkGate?

    /// - Parameters:
    ///   - routeWatch: the kernel's announcements of route changes; nil: periodic looks only.
    ///   - gate: told at each look which destinations ride a spent budget; nil: budgets are only shown.
    package init(
        spool: Spool, logger: Logger, routeWatch: RouteWatch? = nil, gate: UplinkGate? = nil,
        configuration: @escaping @Sendable () -> Configuration
    ) {
        self.spool = spool
        self.addresses = AddressCache(clock: spool.clock)
        self.logger = logger
        self.routeWatch = routeWatch
        self.gate = gate
        self.configuration = configuration
    }

    /// Per uplink, its wire bytes today and this month (UTC) as of the last look.
    package var usage: [String: (today: Int64, month: Int64)] { state.withLock { $0.usage ?? [:] } }

    /// The route of each destination as of the last look.
    package var routes: [String: UplinkRoute.Answer] { state.withLock { $0.routes } }

    /// Looks at once, then every `interval` (or at a route change) until cancelled; the day and
    /// the interval are the spool's clock's (the relay's). The spool's
    /// tally starts at zero when it opens, so the first look counts what the forwarders sent
    /// since the start, nothing from before a restart. Routes are asked for on a thread of
    /// their own: resolving a destination's host can wait on DNS.
    package func run() async {
        let changes = routeWatch?.changed.subscribe()
        defer { if let changes { routeWatch?.changed.unsubscribe(changes) } }
        while !Task.isCancelled {
            let configuration = configuration()
            // Without uplinks (today, or after a reload took them out) nothing is asked or counted.
            let addresses = self.addresses
            let routes =
                configuration.uplinks.isEmpty
                ? [:]
                : await onDedicatedThread(named: "georelay.uplinks") {
                    StatusReport.uplinkAnswers(configuration, addresses: addresses)
                }
            await look(
                routes: routes, configuration: configuration,
                interfaces: Self.interfaceBytes(configuration.uplinks.filter { $0.count == .interface }))
            // The next look: at the interval, or at once when the kernel announces a change.
            if let changes {
                await changes.wait(timeout: Self.interval, clock: spool.clock)
                if Task.isCancelled { return }
            } else {
                await spool.clock.sleep(for: Self.interval)
            }
        }
    }

    /// One look with the routes and interface counters already asked for: the bytes recorded
    /// since the last look put on their uplinks and held in the spool, the day's and month's
    /// totals (the spool's, at the first look after a start), and the gate told. The simulation
    /// drives it with routes of its own.
    package func look(
        routes: [String: UplinkRoute.Answer], configuration: Configuration, interfaces: [String: Int64]
    ) async {
        let before = self.routes
        // The day the bytes are counted to: the clock's, or the later one already reached.
        let day = max(Self.day(spool.clock.nowMs()), state.withLock { $0.day })
        if state.withLock({ $0.usage == nil }), !configuration.uplinks.isEmpty {
            let spool = self.spool
            let stored =
                (try? await onDedicatedThread(named: "georelay.uplinks") {
                    try spool.makeReader().uplinkUsage(day: day)
                }) ?? [:]
            state.withLock { $0.usage = $0.usage ?? stored }
        }
        let usage = look(routes: routes, recorded: spool.wireBytesRecorded(), day: day, interfaces: interfaces)
        spool.record(uplinkUsage: usage)
        let totals = tally(usage, day: day)
        gate?.set(
            Self.restrictions(configuration, routes: routes, usage: totals),
            allowances: Self.allowances(configuration, routes: routes, usage: totals),
            routes: routes.mapValues(\.phrase))
        // The crew's record of failovers: each destination's uplink when first known and at each change.
        for (destination, answer) in routes.sorted(by: { $0.key < $1.key }) where before[destination] != answer {
            logger.notice("\(destination) now \(answer.phrase)")
        }
    }

    /// Per uplink, its interface's bytes both ways as the kernel counts them (`/sys/class/net/<if>/statistics`);
    /// an interface that is not there (a modem not dialled) is left out.
    static func interfaceBytes(_ uplinks: [Configuration.Uplink]) -> [String: Int64] {
        var bytes: [String: Int64] = [:]
        for uplink in uplinks {
            func read(_ name: String) -> Int64? {
                (try? String(contentsOfFile: "/sys/class/net/\(uplink.interface)/statistics/\(name)", encoding: .utf8))
                    .flatMap { Int64($0.trimmingWhitespace) }
            }
            if let received = read("rx_bytes"), let sent = read("tx_bytes") {
                bytes[uplink.name] = received.saturatingPlus(sent)
            }
        }
        return bytes
    }

    /// Takes routes and byte totals of one look; returns the bytes to add per uplink. Bytes on a
    /// route no uplink names (a LAN, loopback) or with no route are not any uplink's.
    ///
    /// - Parameter interfaces: per uplink counted by its interface (`count: "interface"`), the
    ///   interface's bytes both ways now: its growth since the last look is the uplink's, in place
    ///   of what the relay's destinations recorded over it (the first look only sets the mark).
    package func look(
        routes: [String: UplinkRoute.Answer], recorded: [String: Int64], day: String,
        interfaces: [String: Int64] = [:]
    ) -> [UplinkUsage] {
        state.withLock { state in
            defer {
                state.routes = routes
                state.counted = recorded
                state.interfaceBytes = interfaces
            }
            var bytes: [String: Int64] = [:]
            for (destination, total) in recorded {
                let delta = total - (state.counted[destination] ?? 0)
                guard delta > 0 else { continue }
                let route =
                    state.routes[destination].flatMap(Self.uplinkName) ?? routes[destination].flatMap(Self.uplinkName)
                if let uplink = route, interfaces[uplink] == nil { bytes[uplink, default: 0] += delta }
            }
            for (uplink, now) in interfaces {
                // A counter that went back (the interface was recreated, a modem redialled) starts afresh.
                guard let before = state.interfaceBytes[uplink], now > before else { continue }
                bytes[uplink, default: 0] += now - before
            }
            return bytes.sorted { $0.key < $1.key }.map { UplinkUsage(uplink: $0.key, day: day, bytes: $0.value) }
        }
    }

    /// Adds a look's bytes to the totals, which start afresh at a new UTC day (today's) or month:
    /// a later one than the last look's (`YYYY-MM-DD` compares as the dates do).
    @discardableResult
    package func tally(_ added: [UplinkUsage], day: String) -> [String: (today: Int64, month: Int64)] {
        state.withLock { state in
            var usage = state.usage ?? [:]
            // Only a later day starts afresh: a wall clock set back across midnight (a box that
            // came up with the wrong time, then NTP) goes on counting into the day it had
            // reached, or the budget would be spent twice under one day's name.
            if day > state.day, !state.day.isEmpty {
                let newMonth = state.day.prefix(7) != day.prefix(7)
                usage = usage.mapValues { (today: 0, month: newMonth ? 0 : $0.month) }
            }
            state.day = max(state.day, day)
            for entry in added {
                let now = usage[entry.uplink] ?? (0, 0)
                usage[entry.uplink] = (now.today + entry.bytes, now.month + entry.bytes)
            }
            state.usage = usage
            return usage
        }
    }

    /// The destinations whose traffic takes an uplink with a spent budget, or one whose `send`
    /// policy is `latestSeconds`, with why, for the gate.
    package static func restrictions(
        _ configuration: Configuration, routes: [String: UplinkRoute.Answer],
        usage: [String: (today: Int64, month: Int64)]
    ) -> [String: UplinkGate.Restriction] {
        var restrictions: [String: UplinkGate.Restriction] = [:]
        for (destination, uplink) in configuredUplinks(configuration, routes: routes) {
            let used = usage[uplink.name] ?? (0, 0)
            if let left = uplink.budget?.left(today: used.today, month: used.month), left.bytes <= 0 {
                restrictions[destination] = spent(uplink, day: left.day)
            } else if let latest = uplink.send.latestSeconds {
                let interval = Int64(latest * 1000)
                restrictions[destination] = UplinkGate.Restriction(
                    uplink: uplink.name, minIntervalMs: interval,
                    reason:
                        "\(uplink.name) carries only alarms and each device's newest position every \(HealthChecks.duration(interval)) (send.latestSeconds); the rest waits for another uplink",
                    maxAlarmsPerDeviceHour: uplink.send.maxAlarmsPerDeviceHour)
            }
        }
        return restrictions
    }

    /// Per destination on an uplink whose budget is not spent yet: what is left of it, and the
    /// restriction it gets when its forwarders spend that before the next look.
    package static func allowances(
        _ configuration: Configuration, routes: [String: UplinkRoute.Answer],
        usage: [String: (today: Int64, month: Int64)]
    ) -> [String: UplinkGate.Allowance] {
        var allowances: [String: UplinkGate.Allowance] = [:]
        for (destination, uplink) in configuredUplinks(configuration, routes: routes) {
            let used = usage[uplink.name] ?? (0, 0)
            guard let left = uplink.budget?.left(today: used.today, month: used.month), left.bytes > 0 else { continue }
            allowances[destination] = UplinkGate.Allowance(
                uplink: uplink.name, bytesLeft: left.bytes, whenSpent: spent(uplink, day: left.day))
        }
        return allowances
    }

    /// Each destination routed over an uplink of the configuration, with that uplink.
    private static func configuredUplinks(_ configuration: Configuration, routes: [String: UplinkRoute.Answer]) -> [(
        String, Configuration.Uplink
    )] {
        routes.compactMap { destination, answer in
            guard let name = uplinkName(answer), let uplink = configuration.uplinks.first(where: { $0.name == name })
            else { return nil }
            return (destination, uplink)
        }
    }

    /// The restriction of a spent budget: the still-alive minimum, or the `latest` policy's
    /// interval where that is longer. Words that stay the same while it holds (a change wakes
    /// every forwarder).
    private static func spent(_ uplink: Configuration.Uplink, day: Bool) -> UplinkGate.Restriction {
        let interval = max(
            Int64(uplink.send.minIntervalSeconds * 1000), uplink.send.latestSeconds.map { Int64($0 * 1000) } ?? 0)
        let budget = uplink.budget ?? Configuration.Budget()
        let spent =
            day
            ? "day budget of \(HealthChecks.bytes(budget.dayBytes ?? 0)) is spent until 00:00 UTC"
            : "month budget of \(HealthChecks.bytes(budget.monthBytes ?? 0)) is spent until the 1st, 00:00 UTC"
        return UplinkGate.Restriction(
            uplink: uplink.name, minIntervalMs: interval,
            reason:
                "\(uplink.name)'s \(spent) or until another uplink carries the traffic: only alarms and a position per device every \(HealthChecks.duration(interval))",
            maxAlarmsPerDeviceHour: uplink.send.maxAlarmsPerDeviceHour)
    }

    private static func uplinkName(_ answer: UplinkRoute.Answer) -> String? {
        if case .uplink(let uplink) = answer { return uplink.name }
        return nil
    }

    /// `YYYY-MM-DD` in UTC.
    package static func day(_ ms: Int64) -> String {
        String(Timestamp.iso8601(milliseconds: ms).prefix(10))
    }
}

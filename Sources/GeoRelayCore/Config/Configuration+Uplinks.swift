import Glibc

/// The box's uplinks, named by the interface each one is (Starlink on `eth1`, an Iridium
/// modem on `ppp0`): which of them carries a destination's traffic is learnt from the
/// kernel's route to the destination, without sending anything (`UplinkRoutes`).
extension Configuration {
    package struct Uplink: Sendable, Equatable {
        package var name: String
        /// The network interface, as `ip link` names it.
        package var interface: String
        /// Paid for by the byte (cellular, satellite), as the crew should see it.
        package var metered = false
        /// What the uplink may carry per UTC day and month, in wire bytes; nil: no limit.
        package var budget: Budget?
        /// What goes over it once its budget is spent.
        package var send = Send()
        /// How its bytes are counted: the relay's own connections, or the interface's counters.
        package var count = Counting.relay

        /// `uplinks[].count`.
        package enum Counting: String, Sendable, CaseIterable {
            /// What the relay's own connections cost (IP bytes per socket): right when the uplink
            /// carries other traffic too (the crew's phones, a chart plotter's updates).
            case relay
            /// The interface's own counters (`/sys/class/net/<if>/statistics`): everything it
            /// carried, DNS and the box's other traffic included. Right when it carries nothing but
            /// the relay's, as a dedicated Iridium modem does.
            case interface
        }

        package init(
            name: String, interface: String, metered: Bool = false, budget: Budget? = nil, send: Send = Send(),
            count: Counting = .relay
        ) {
            self.name = name
            self.interface = interface
            self.metered = metered
            self.budget = budget
            self.send = send
            self.count = count
        }
    }

    /// `uplinks[].send`: what an uplink carries, always and once its budget is spent.
    package struct Send: Sendable, Equatable {
        /// The still-alive minimum: per device at most one position this often (device time)
        /// once the budget is spent; alarms always go. 15 min: a vessel's position on the
        /// server stays current to within a few miles for about 100 bytes an hour per device.
        package var minIntervalSeconds: Double = 900
        /// `latest`: over this uplink, budget or not, only each device's newest position at most
        /// this often (and alarms); the rest stays owed for a wider uplink. nil: the
        /// destination's own filter decides.
        package var latestSeconds: Double?
        /// Alarms per device and hour that go over this uplink once its budget is spent (or under
        /// `latest`): a faulty or hostile unit raising an alarm a second cannot spend the plan.
        /// Those beyond wait in the backlog and go as history when the budget frees.
        package var maxAlarmsPerDeviceHour = 12

        package init(minIntervalSeconds: Double = 900, latestSeconds: Double? = nil, maxAlarmsPerDeviceHour: Int = 12) {
            self.minIntervalSeconds = minIntervalSeconds
            self.latestSeconds = latestSeconds
            self.maxAlarmsPerDeviceHour = maxAlarmsPerDeviceHour
        }
    }

    /// `uplinks[].budget`: wire bytes (both directions, probes and logins included) per UTC day
    /// and per UTC month; either or both.
    package struct Budget: Sendable, Equatable {
        package var dayBytes: Int64?
        package var monthBytes: Int64?

        package init(dayBytes: Int64? = nil, monthBytes: Int64? = nil) {
            self.dayBytes = dayBytes
            self.monthBytes = monthBytes
        }

        /// Spent when either period's bytes reached its limit.
        package func isSpent(today: Int64, month: Int64) -> Bool {
            left(today: today, month: month).bytes <= 0
        }

        /// What is left of the nearer limit, and whether that is the day's (on a tie, the day's).
        package func left(today: Int64, month: Int64) -> (bytes: Int64, day: Bool) {
            let day = dayBytes.map { $0 - today } ?? .max
            let month = monthBytes.map { $0 - month } ?? .max
            return day <= month ? (day, true) : (month, false)
        }
    }

    /// `uplinks`: none configured leaves the relay as it was.
    static func parseUplinks(_ items: [JSONValue]) throws(ConfigError) -> [Uplink] {
        var uplinks: [Uplink] = []
        for (index, item) in items.enumerated() {
            var node = try ConfigNode(item, path: "uplinks[\(index)]")
            let name = try node.string("name", default: "")
            guard !name.isEmpty else { throw ConfigError(path: node.child("name"), "an uplink needs a name") }
            let interface = try node.string("interface", default: "")
            // IFNAMSIZ is 16 with its NUL; a name with '/' or a space is never an interface.
            guard !interface.isEmpty, interface.utf8.count <= 15,
                !interface.contains(where: { $0 == "/" || $0.isWhitespace })
            else {
                throw ConfigError(
                    path: node.child("interface"),
                    "\"\(interface)\" is not a network interface name (up to 15 characters, no '/' or spaces)")
            }
            let metered = try node.bool("metered", default: false)
            let counting: Uplink.Counting = try node.choice("count", default: .relay)
            let budget = node.contains("budget") ? try parseBudget(try node.node("budget")) : nil
            var send = Send()
            if node.contains("send") {
                var policy = try node.node("send")
                send.minIntervalSeconds = try policy.number(
                    "minIntervalSeconds", default: send.minIntervalSeconds, min: 1, max: 31_536_000)
                if policy.contains("latestSeconds") {
                    send.latestSeconds = try policy.number("latestSeconds", default: 0, min: 1, max: 31_536_000)
                }
                send.maxAlarmsPerDeviceHour = try policy.integer(
                    "maxAlarmsPerDeviceHour", default: send.maxAlarmsPerDeviceHour, min: 0, max: 3600)
                try policy.finish()
            }
            try node.finish()
            if uplinks.contains(where: { $0.name == name }) {
                throw ConfigError(path: node.child("name"), "duplicate uplink name \"\(name)\"")
            }
            if let other = uplinks.first(where: { $0.interface == interface }) {
                throw ConfigError(
                    path: node.child("interface"), "interface \(interface) is already uplink \"\(other.name)\"")
            }
            uplinks.append(
                Uplink(name: name, interface: interface, metered: metered, budget: budget, send: send, count: counting))
        }
        return uplinks
    }

    private static func parseBudget(_ node: ConfigNode) throws(ConfigError) -> Budget {
        var node = node
        func limit(_ key: String) throws(ConfigError) -> Int64? {
            guard node.contains(key) else { return nil }
            return Int64(try node.integer(key, default: 0, min: 1))
        }
        let budget = Budget(dayBytes: try limit("dayBytes"), monthBytes: try limit("monthBytes"))
        try node.finish()
        guard budget.dayBytes != nil || budget.monthBytes != nil else {
            throw ConfigError(path: node.path, "a budget needs dayBytes, monthBytes or both")
        }
        return budget
    }
}

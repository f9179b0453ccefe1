import Foundation

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

        package init(name: String, interface: String, metered: Bool = false) {
            self.name = name
            self.interface = interface
            self.metered = metered
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
            guard !interface.isEmpty, interface.utf8.count <= 15, !interface.contains(where: { $0 == "/" || $0.isWhitespace }) else {
                throw ConfigError(path: node.child("interface"), "\"\(interface)\" is not a network interface name (up to 15 characters, no '/' or spaces)")
            }
            let metered = try node.bool("metered", default: false)
            try node.finish()
            if uplinks.contains(where: { $0.name == name }) {
                throw ConfigError(path: node.child("name"), "duplicate uplink name \"\(name)\"")
            }
            if let other = uplinks.first(where: { $0.interface == interface }) {
                throw ConfigError(path: node.child("interface"), "interface \(interface) is already uplink \"\(other.name)\"")
            }
            uplinks.append(Uplink(name: name, interface: interface, metered: metered))
        }
        return uplinks
    }
}

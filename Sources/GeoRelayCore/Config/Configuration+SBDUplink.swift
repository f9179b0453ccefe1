extension Configuration {
    /// `sbd`: the Iridium SBD modem aboard, used only while no IP uplink delivers, and at once for
    /// an alarm IP has not delivered; its messages go to a shore relay (`ingest.sbd` there).
    package struct SBDUplinkSettings: Sendable, Equatable {
        /// The modem's serial device.
        package var device = ""
        package var baud = 19200
        /// RTS/CTS wired; a three-wire link (most RockBLOCK cables) has none.
        package var flowControl = false
        /// The device ids the message numbers as units, in this order: the shore relay's
        /// `ingest.sbd.vessels[].units` must be the same list.
        package var units: [String] = []
        package var relayID: UInt32 = 0
        /// The destinations the shore relay delivers to: while none has had a delivery over IP
        /// for `fallbackSeconds`, SBD carries the units' positions; their alarms not delivered
        /// within `alarmGraceSeconds` go by SBD at once.
        package var destinations: [String] = []
        package var fallbackSeconds = 600.0
        package var alarmGraceSeconds = 30.0
        package var intervalSeconds = 900.0
        package var dailyCredits = 120
        package var monthlyCredits = 2000

        package init() {}

        static func parse(_ node: inout ConfigNode, destinations known: [String]) throws(ConfigError)
            -> SBDUplinkSettings
        {
            var settings = SBDUplinkSettings()
            settings.device = try node.string("device", default: "")
            guard settings.device.hasPrefix("/") else {
                throw ConfigError(path: node.child("device"), "expected the modem's serial device, e.g. /dev/ttyUSB0")
            }
            settings.baud = try node.integer("baud", default: 19200)
            guard SerialLine.speed(settings.baud) != nil else {
                throw ConfigError(path: node.child("baud"), "unsupported baud rate \(settings.baud)")
            }
            settings.flowControl = try node.bool("flowControl", default: false)
            settings.units = try SBDShoreSettings.parseUnits(try node.array("units"), path: node.child("units"))
            settings.relayID = UInt32(try node.integer("relayId", default: 0, min: 0, max: Int(UInt32.max)))
            if let items = try node.array("destinations") {
                for (index, item) in items.enumerated() {
                    guard case .string(let name) = item, known.contains(name) else {
                        throw ConfigError(
                            path: "\(node.child("destinations"))[\(index)]", "expected the name of a destination")
                    }
                    settings.destinations.append(name)
                }
            } else {
                settings.destinations = known
            }
            settings.fallbackSeconds = try node.number("fallbackSeconds", default: 600, min: 1, max: 86_400 * 7)
            settings.alarmGraceSeconds = try node.number("alarmGraceSeconds", default: 30, min: 0, max: 86_400)
            settings.intervalSeconds = try node.number("intervalSeconds", default: 900, min: 60, max: 86_400)
            settings.dailyCredits = try node.integer("dailyCredits", default: 120, min: 0, max: 100_000)
            settings.monthlyCredits = try node.integer("monthlyCredits", default: 2000, min: 0, max: 1_000_000)
            try node.finish()
            return settings
        }
    }
}

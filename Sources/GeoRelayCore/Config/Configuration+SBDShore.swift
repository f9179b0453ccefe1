extension Configuration {
    /// `ingest.sbd`: a shore relay's door for the messages its vessels send over Iridium SBD.
    package struct SBDShoreSettings: Sendable, Equatable {
        /// `HOST:PORT` the Iridium gateway delivers DirectIP MO messages to; nil: off.
        package var directIP: String?
        /// Answer each message with a DirectIP confirmation (when the account asks for them).
        package var confirm = false
        /// The vessels whose modems may send here, each with its units in the order the relay
        /// aboard numbers them.
        package var vessels: [SBDShore.Vessel] = []

        package init() {}

        static func parse(_ node: inout ConfigNode) throws(ConfigError) -> SBDShoreSettings {
            var settings = SBDShoreSettings()
            settings.directIP = try node.optionalString("directIP")
            settings.confirm = try node.bool("confirm", default: false)
            for (index, item) in (try node.array("vessels") ?? []).enumerated() {
                var vessel = try ConfigNode(item, path: node.child("vessels[\(index)]"))
                let imei = try vessel.string("imei", default: "")
                guard imei.utf8.count == 15, imei.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
                    throw ConfigError(path: vessel.child("imei"), "expected the modem's IMEI: 15 digits")
                }
                guard !settings.vessels.contains(where: { $0.imei == imei }) else {
                    throw ConfigError(path: vessel.child("imei"), "IMEI \(imei) is listed twice")
                }
                let units = try parseUnits(try vessel.array("units"), path: vessel.child("units"))
                let relayID =
                    vessel.contains("relayId")
                    ? UInt32(try vessel.integer("relayId", default: 0, min: 0, max: Int(UInt32.max))) : nil
                try vessel.finish()
                settings.vessels.append(SBDShore.Vessel(imei: imei, units: units, relayID: relayID))
            }
            if settings.directIP != nil, settings.vessels.isEmpty {
                throw ConfigError(
                    path: node.child("vessels"), "the DirectIP door takes messages only from the vessels listed here")
            }
            try node.finish()
            return settings
        }

        /// A vessel's device ids, in order: at least one, at most 32 (5 bits a message gives a
        /// unit), each a valid device id and listed once.
        static func parseUnits(_ items: [JSONValue]?, path: String) throws(ConfigError) -> [String] {
            guard let items, !items.isEmpty, items.count <= SBDMessage.maximumUnits else {
                throw ConfigError(path: path, "expected 1 to \(SBDMessage.maximumUnits) device ids")
            }
            var units: [String] = []
            for (index, item) in items.enumerated() {
                guard case .string(let id) = item, !id.isEmpty, id.utf8.count <= 128,
                    !ControlEscaping.containsControl(id)
                else {
                    throw ConfigError(
                        path: "\(path)[\(index)]", "expected a device id (at most 128 bytes, no control characters)")
                }
                guard !units.contains(id) else { throw ConfigError(path: "\(path)[\(index)]", "\(id) is listed twice") }
                units.append(id)
            }
            return units
        }
    }
}

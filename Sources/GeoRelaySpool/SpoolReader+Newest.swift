extension SpoolReader {
    /// Each of `devices`' newest fix by fix time, where it is now (the SBD uplink's units); a
    /// device with none stored is left out. One indexed lookup a device (`positions_fix`).
    package func newestFixes(devices: [String]) throws(SpoolError) -> [String: StoredPosition] {
        let known = Dictionary(try self.devices().map { ($0.name, $0.id) }, uniquingKeysWith: { first, _ in first })
        var newest: [String: StoredPosition] = [:]
        for device in devices {
            guard let id = known[device] else { continue }
            let found: StoredPosition? = try wrap {
                let select = try db.statement(
                    Self.bothTables(
                        "SELECT \(Self.columns) FROM %TABLE WHERE device_id = ?1", then: "ORDER BY fix_ms DESC LIMIT 1")
                )
                select.bind(1, id)
                guard try select.step() else { return nil }
                return StoredPosition(
                    seq: select.int64(0), deviceID: id, receivedMs: select.int64(1),
                    position: Self.readPosition(select, device: device))
            }
            if let found { newest[device] = found }
        }
        return newest
    }
}

import GeoRelayCore

/// Each stored position's odometer (`Odometer`), counted as it is stored.
extension SpoolStore {
    /// `position` with its odometer set (a source's own moved from its attribute to the field).
    func withOdometer(_ position: Position, deviceID: Int64) throws -> Position {
        var p = position
        if Odometer.reported(p) != nil { p.attributes.removeAll { $0.key == "odometer" } }
        var odometer: Odometer
        if let known = odometers[deviceID] {
            odometer = known
        } else if let newest = try newestOdometer(deviceID: deviceID) {
            odometer = newest
        } else {
            odometer = Odometer(first: position)
            odometers[deviceID] = odometer
            p.odometer = Odometer.stored(odometer.metres)
            return p
        }
        if position.timeMs >= odometer.newestMs {
            p.odometer = Odometer.stored(odometer.advance(to: position))
            odometers[deviceID] = odometer
        } else {
            p.odometer = Odometer.stored(
                Odometer.late(position, after: try predecessor(of: position, deviceID: deviceID)))
        }
        return p
    }

    /// How many of a device's newest stored positions are searched for the odometer's anchor
    /// after a restart: a device that sat inside the radius for longer anchors on the oldest of
    /// them, which is inside the radius of the true anchor anyway.
    static let anchorSearchRows = 512

    /// The odometer as the device's newest stored positions leave it: their figure, anchored at
    /// the oldest of the newest run that carries it (where it last advanced). nil: none stored.
    /// Rows stored before the odometer existed carry none: the count starts afresh from the newest.
    private func newestOdometer(deviceID: Int64) throws -> Odometer? {
        let select = try db.statement(
            SpoolReader.bothTables(
                "SELECT fix_ms, lat, lon, odometer FROM %TABLE WHERE device_id = ?1",
                then: "ORDER BY fix_ms DESC LIMIT \(Self.anchorSearchRows)"))
        select.bind(1, deviceID)
        defer { select.reset() }
        guard try select.step() else { return nil }
        let newestMs = select.int64(0)
        var odometer = Odometer(
            anchorLat: select.double(1), anchorLon: select.double(2),
            metres: select.optionalDouble(3) ?? Odometer.start,
            newestMs: newestMs)
        guard let metres = select.optionalDouble(3) else { return odometer }
        while try select.step(), select.optionalDouble(3) == metres {
            odometer.anchorLat = select.double(1)
            odometer.anchorLon = select.double(2)
        }
        return odometer
    }

    /// The stored position of the device just before `position` in fix time.
    private func predecessor(of position: Position, deviceID: Int64) throws -> (
        lat: Double, lon: Double, metres: Double
    )? {
        let select = try db.statement(
            SpoolReader.bothTables(
                "SELECT fix_ms, lat, lon, odometer FROM %TABLE WHERE device_id = ?1 AND fix_ms < ?2",
                then: "ORDER BY fix_ms DESC LIMIT 1"))
        select.bind(1, deviceID)
        select.bind(2, position.timeMs)
        defer { select.reset() }
        guard try select.step() else { return nil }
        return (select.double(1), select.double(2), select.optionalDouble(3) ?? Odometer.start)
    }
}

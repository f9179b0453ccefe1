import Glibc

/// A device's odometer: metres along its track in fix-time order, fixed once per position when
/// it is stored, so any order of delivery, a restart or a replay gives the server the same
/// figure (Traccar's reports take `last.odometer − first.odometer` when both carry one).
///
/// The rule is the location filter's stop rule: movement inside `radiusMeters` of where the
/// odometer last advanced (its anchor) is GPS wander, not travel, so a moored boat swinging
/// and wandering 20–40 m accrues nothing. A fix farther than that adds the straight line from
/// the anchor and becomes the anchor. Along a passage that is the track's length to a fraction
/// of a per cent (a 100 m chord of a turn of 500 m radius is 0.2 ‰ short); at any moment the
/// last stretch inside the radius is not counted yet, so a figure is at most one radius behind.
///
/// A source that reports its own odometer (an `odometer` attribute, in metres) keeps it, and the
/// relay's counts on from there. A fix older than the device's newest (a source's late history)
/// takes its predecessor's odometer plus the same rule's step, and leaves the newer ones as they
/// are: what was stored, and perhaps sent, is never changed.
package struct Odometer: Sendable, Equatable {
    /// The default filter's stationary radius: the one stop rule the relay documents.
    package static let radiusMeters = FilterSettings().stationaryRadiusMeters
    /// Where a device's odometer starts: 1 m, not 0, because Traccar reads an odometer of 0 as
    /// none (`PositionUtil.calculateDistance` wants both ends non-zero), and a report whose
    /// period starts at the device's first fix would fall back on the `totalDistance` chain.
    package static let start = 1.0

    /// Where the odometer last advanced.
    package var anchorLat: Double
    package var anchorLon: Double
    /// Metres at the newest fix, unrounded (the spool stores whole metres).
    package var metres: Double
    /// The newest fix time counted.
    package var newestMs: Int64

    package init(anchorLat: Double, anchorLon: Double, metres: Double, newestMs: Int64) {
        self.anchorLat = anchorLat
        self.anchorLon = anchorLon
        self.metres = metres
        self.newestMs = newestMs
    }

    /// A device's first position: where its odometer starts (at its own figure, or 0).
    package init(first position: Position) {
        self.init(
            anchorLat: position.lat, anchorLon: position.lon, metres: Self.reported(position) ?? Self.start,
            newestMs: position.timeMs)
    }

    /// The figure a stored position carries: whole metres (SQLite stores a whole REAL as an
    /// integer, 3–4 bytes instead of 8), and the server needs no finer.
    package static func stored(_ metres: Double) -> Double { metres.rounded() }

    /// The odometer a source reports in its position (an `odometer` attribute of metres within
    /// ``PositionBounds/odometer``); nil when it reports none.
    package static func reported(_ position: Position) -> Double? {
        guard case .number(let metres)? = position.attributes.last(where: { $0.key == "odometer" })?.value,
            metres.isFinite, PositionBounds.odometer.contains(metres)
        else { return nil }
        return metres
    }

    /// Counts the device's next position in fix-time order (at or after `newestMs`) and returns
    /// the metres it carries.
    package mutating func advance(to position: Position) -> Double {
        if let own = Self.reported(position) {
            metres = own
            anchorLat = position.lat
            anchorLon = position.lon
        } else if Self.mayLeave(anchorLat, anchorLon, position.lat, position.lon) {
            let step = Geo.distance(lat1: anchorLat, lon1: anchorLon, lat2: position.lat, lon2: position.lon)
            if step > Self.radiusMeters {
                metres += step
                anchorLat = position.lat
                anchorLon = position.lon
            }
        }
        newestMs = max(newestMs, position.timeMs)
        return metres
    }

    /// Whether a fix may be outside the radius of the anchor: a flat-earth check (one multiply
    /// per axis, a cosine of the anchor's latitude) that is never more than a fraction of a per
    /// cent short at this scale, given a tenth of margin; most fixes (every second at 5 m/s, a
    /// mooring's wander) stop here, and only the rest pay for the haversine. Ingest counts every
    /// stored position through this.
    static func mayLeave(_ lat1: Double, _ lon1: Double, _ lat2: Double, _ lon2: Double) -> Bool {
        let metresPerDegree = Geo.earthRadiusMeters * .pi / 180
        let north = (lat2 - lat1) * metresPerDegree
        var east = lon2 - lon1
        if east > 180 { east -= 360 } else if east < -180 { east += 360 }
        east *= metresPerDegree * cos(lat1 * .pi / 180)
        let bound = radiusMeters * 0.9
        return north * north + east * east > bound * bound
    }

    /// The metres of a position older than the device's newest, from the stored position just
    /// before it in fix time (nil: none before it, it starts at `start`).
    package static func late(
        _ position: Position, after predecessor: (lat: Double, lon: Double, metres: Double)?
    ) -> Double {
        if let own = reported(position) { return own }
        guard let predecessor else { return start }
        let step = Geo.distance(lat1: predecessor.lat, lon1: predecessor.lon, lat2: position.lat, lon2: position.lon)
        return predecessor.metres + (step > radiusMeters ? step : 0)
    }
}

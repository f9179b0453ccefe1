import Glibc

/// Great-circle geometry on a spherical Earth: ample for deciding whether a
/// device moved 50 m, and identical to what the Traccar client computes.
package enum Geo {
    package static let earthRadiusMeters = 6_371_008.8

    /// Haversine distance in metres.
    package static func distance(lat1: Double, lon1: Double, lat2: Double, lon2: Double) -> Double {
        let φ1 = lat1 * .pi / 180, φ2 = lat2 * .pi / 180
        let dφ = (lat2 - lat1) * .pi / 180, dλ = (lon2 - lon1) * .pi / 180
        let a = sin(dφ / 2) * sin(dφ / 2) + cos(φ1) * cos(φ2) * sin(dλ / 2) * sin(dλ / 2)
        return 2 * earthRadiusMeters * atan2(sqrt(a), sqrt(max(0, 1 - a)))
    }

    /// The smaller angle between two courses, 0–180°.
    package static func courseChange(_ a: Double, _ b: Double) -> Double {
        let difference = abs(a - b).truncatingRemainder(dividingBy: 360)
        return difference > 180 ? 360 - difference : difference
    }
}

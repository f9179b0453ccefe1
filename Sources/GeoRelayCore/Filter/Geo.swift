import Glibc

/// Great-circle geometry on a spherical Earth: ample for deciding whether a
/// device moved 50 m, and identical to what the Traccar client computes.
package enum Geo {
    package static let earthRadiusMeters = 6_371_008.8

    /// Haversine distance in metres.
    package static func distance(lat1: Double, lon1: Double, lat2: Double, lon2: Double) -> Double {
        let phi1 = lat1 * .pi / 180
        let phi2 = lat2 * .pi / 180
        let dPhi = (lat2 - lat1) * .pi / 180
        let dLambda = (lon2 - lon1) * .pi / 180
        let a = sin(dPhi / 2) * sin(dPhi / 2) + cos(phi1) * cos(phi2) * sin(dLambda / 2) * sin(dLambda / 2)
        return 2 * earthRadiusMeters * atan2(sqrt(a), sqrt(max(0, 1 - a)))
    }

    /// The smaller angle between two courses, 0–180°.
    package static func courseChange(_ a: Double, _ b: Double) -> Double {
        let difference = abs(a - b).truncatingRemainder(dividingBy: 360)
        return difference > 180 ? 360 - difference : difference
    }
}

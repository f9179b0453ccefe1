import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

/// The odometer's rule (`Odometer`): the track's length in fix-time order, GPS wander inside the
/// radius never counted.
@Suite(.offThePool) struct OdometerTests {
    /// A point `metres` north of 59° N, 10° E.
    func north(_ metres: Double, second: Int64, attributes: [Attribute] = []) -> Position {
        Position(
            device: "boat", timeMs: 1_784_953_800_000 + second * 1000,
            lat: 59 + metres / Geo.earthRadiusMeters * 180 / .pi, lon: 10, attributes: attributes)
    }

    @Test func aPassageCountsItsLengthAndAMooringsWanderNothing() {
        var odometer = Odometer(first: north(0, second: 0))
        // 10 km north at 5 m/s, a fix a second.
        var metres = 0.0
        for second in 1...2000 { metres = odometer.advance(to: north(Double(second) * 5, second: Int64(second))) }
        #expect(abs(metres - 10_001) <= Odometer.radiusMeters)
        // A day moored there, wandering up to 40 m either way: nothing more.
        for second in 2001...88_400 {
            let wander = 40 * sin(Double(second) / 97) * cos(Double(second) / 13)
            metres = odometer.advance(to: north(10_000 + wander, second: Int64(second)))
        }
        #expect(abs(metres - 10_001) <= Odometer.radiusMeters)
        // And the next leg counts on from there.
        metres = odometer.advance(to: north(12_000, second: 88_800))
        #expect(abs(metres - 12_001) <= Odometer.radiusMeters)
    }

    @Test func aSourcesOwnOdometerIsKeptAndCountedOnFrom() {
        var odometer = Odometer(first: north(0, second: 0, attributes: [Attribute("odometer", .number(5_000_000))]))
        #expect(odometer.metres == 5_000_000)
        #expect(odometer.advance(to: north(50, second: 10)) == 5_000_000)
        #expect(abs(odometer.advance(to: north(1000, second: 200)) - 5_001_000) < 0.01)
        let reported = north(1500, second: 300, attributes: [Attribute("odometer", .number(7_000_000))])
        #expect(odometer.advance(to: reported) == 7_000_000)
        // A text or negative `odometer` is not a figure the relay keeps (ingest refuses both).
        #expect(Odometer.reported(north(0, second: 0, attributes: [Attribute("odometer", .string("12"))])) == nil)
        #expect(Odometer.reported(north(0, second: 0, attributes: [Attribute("odometer", .number(-1))])) == nil)
    }

    @Test func aLateFixCountsFromItsPredecessorAndMovesNothing() {
        let late = north(3000, second: 600)
        #expect(Odometer.late(late, after: nil) == Odometer.start)
        #expect(abs(Odometer.late(late, after: (lat: north(1000, second: 0).lat, lon: 10, metres: 1000)) - 3000) < 0.01)
        // Inside the radius of its predecessor: its figure.
        #expect(Odometer.late(late, after: (lat: north(2950, second: 0).lat, lon: 10, metres: 2950)) == 2950)
    }

    @Test func theDoorRefusesAnOdometerThatIsNotMetres() {
        #expect(PositionBounds.problem(in: Attribute("odometer", .string("far"))) != nil)
        #expect(PositionBounds.problem(in: Attribute("odometer", .number(-3))) != nil)
        #expect(PositionBounds.problem(in: Attribute("odometer", .number(123_456))) == nil)
    }
}

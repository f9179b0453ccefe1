import Foundation
import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

/// Metres north of 59.9 N, 10.7 E, as latitude.
func north(_ meters: Double) -> Double { 59.9 + meters / 111_195 }

func fix(_ second: Int64, north metres: Double = 0, course: Double? = nil, alarm: String? = nil, motion: Bool? = nil)
    -> Position
{
    Position(
        device: "d", timeMs: second * 1000, lat: north(metres), lon: 10.7, course: course, alarm: alarm,
        attributes: motion.map { [Attribute("motion", .bool($0))] } ?? [])
}

/// Runs positions through a filter; returns which were sent (their seconds) and the motion flags.
func run(_ filter: LocationFilter, _ positions: [Position]) -> (sent: [Int64], motions: [Int64: Bool]) {
    var state = FilterState()
    var sent: [Int64] = []
    var motions: [Int64: Bool] = [:]
    for p in positions {
        let (decision, next) = filter.evaluate(p, state: state)
        state = next
        if case .send(let motion) = decision {
            sent.append(p.timeMs / 1000)
            if let motion { motions[p.timeMs / 1000] = motion }
        }
    }
    return (sent, motions)
}

@Suite(.offThePool) struct LocationFilterTests {
    func settings(_ change: (inout FilterSettings) -> Void = { _ in }) -> LocationFilter {
        var s = FilterSettings()
        s.stopDetection = false
        change(&s)
        return LocationFilter(settings: s)
    }

    @Test func defaultsAreTheSDKs() {
        let d = FilterSettings()
        #expect(d.distanceMeters == 75 && d.intervalSeconds == 300 && d.angleDegrees == 0)
        #expect(d.stopDetection && d.stopTimeoutSeconds == 60 && d.stationaryRadiusMeters == 100)
        #expect(d.heartbeatIntervalSeconds == 0 && d.mode == .filtered)
    }

    @Test func firstPositionIsAlwaysSent() {
        #expect(
            run(
                settings {
                    $0.distanceMeters = 0
                    $0.intervalSeconds = 0
                }, [fix(0)]
            ).sent == [0])
    }

    /// (rule under test, positions as (second, metres north, course), expected sent seconds); typed
    /// here, since inferring a literal of nested tuples costs the compiler seconds.
    static let rulesAlone: [(String, [(Int, Double, Double)], [Int64])] = [
        ("distance 75 m", [(0, 0.0, 0.0), (10, 50, 0), (20, 80, 0), (30, 120, 0), (40, 160, 0)], [0, 20, 40]),
        (
            "interval 300 s", [(0, 0, 0), (100, 10, 0), (299, 20, 0), (300, 30, 0), (500, 35, 0), (600, 40, 0)],
            [0, 300, 600]
        ),
        // 350→10 is 20°, 350→25 is 35° (sent), 25→50 is 25°, 25→70 is 45° (sent), 70→100 is 30° (sent).
        (
            "angle 30°", [(0, 0, 350), (10, 1, 10), (20, 2, 25), (30, 3, 50), (40, 4, 70), (50, 5, 100)],
            [0, 20, 40, 50]
        ),
    ]

    @Test(arguments: rulesAlone)
    func eachRuleAlone(rule: String, points: [(Int, Double, Double)], expected: [Int64]) {
        let filter = settings { s in
            s.distanceMeters = rule.hasPrefix("distance") ? 75 : 0
            s.intervalSeconds = rule.hasPrefix("interval") ? 300 : 0
            s.angleDegrees = rule.hasPrefix("angle") ? 30 : 0
        }
        #expect(run(filter, points.map { fix(Int64($0.0), north: $0.1, course: $0.2) }).sent == expected, "\(rule)")
    }

    @Test func anyRuleIsEnough() {
        let filter = settings { $0.angleDegrees = 45 }
        // 0: first; 50: turned 90° (angle); 100: 80 m (distance); 400: 300 s later (interval).
        let positions = [
            fix(0, course: 0), fix(50, north: 10, course: 90), fix(100, north: 90, course: 90),
            fix(400, north: 95, course: 90),
        ]
        #expect(run(filter, positions).sent == [0, 50, 100, 400])
    }

    @Test func zeroDisablesARuleAndAllModeSendsEverything() {
        let off = settings {
            $0.distanceMeters = 0
            $0.intervalSeconds = 0
        }
        #expect(run(off, (0..<10).map { fix(Int64($0) * 1000, north: Double($0) * 500) }).sent == [0])
        let all = settings { $0.mode = .all }
        #expect(run(all, (0..<10).map { fix(Int64($0), north: 0) }).sent == Array(0..<10))
    }

    @Test func alarmsBypassEveryRule() {
        let filter = settings()
        #expect(run(filter, [fix(0), fix(1), fix(2, alarm: "sos"), fix(3)]).sent == [0, 2])
    }

    @Test func stopIsSentOnceThenNothingUntilItMovesOrTheHeartbeat() {
        var s = FilterSettings()
        s.heartbeatIntervalSeconds = 600
        let filter = LocationFilter(settings: s)
        // Moored for an hour with 30 m of jitter, then under way.
        var positions = (0..<3600).map { i in fix(Int64(i), north: 30 * sin(Double(i) / 7)) }
        positions += (0..<120).map { i in fix(Int64(3600 + i), north: 30 + Double(i) * 5) }
        let (sent, motions) = run(filter, positions)
        #expect(motions[60] == false) // stopped after stopTimeoutSeconds inside the radius
        #expect(motions.values.filter { $0 == false }.count == 1) // one stop, not dozens
        let leaving = try! #require(motions.first { $0.value == true }?.key)
        #expect(leaving > 3600 && leaving < 3640) // sent at once when it leaves the radius
        let whileStopped = sent.filter { $0 > 60 && $0 < leaving }
        #expect(whileStopped == [660, 1260, 1860, 2460, 3060]) // only heartbeats
    }

    @Test func explicitMotionWins() {
        var s = FilterSettings()
        s.distanceMeters = 0
        s.intervalSeconds = 0
        // The collector says stopped at 1 although the fixes have not settled; at 3 the fixes
        // leave the radius, at 4 the collector says moving (already so: no second change).
        let (sent, motions) = run(
            LocationFilter(settings: s),
            [fix(0), fix(1, motion: false), fix(2), fix(3, north: 500), fix(4, north: 500, motion: true)])
        #expect(motions == [1: false, 3: true])
        #expect(sent == [0, 1, 3])
    }

    @Test func courseChangeFoldsAround360() {
        #expect(Geo.courseChange(350, 10) == 20)
        #expect(Geo.courseChange(10, 350) == 20)
        #expect(Geo.courseChange(0, 180) == 180)
        #expect(Geo.courseChange(90, 270) == 180)
        #expect(abs(Geo.distance(lat1: 59.9, lon1: 10.7, lat2: north(100), lon2: 10.7) - 100) < 0.5)
    }
}

@Suite(.offThePool) struct FilterSettingsTests {
    @Test(arguments: [
        "distanceMeters", "intervalSeconds", "angleDegrees", "stopTimeoutSeconds", "stationaryRadiusMeters",
        "heartbeatIntervalSeconds",
    ])
    func negativeValuesAreRefusedNamingTheKey(key: String) {
        do {
            _ = try Configuration.parse("{destinations: [{filter: {\(key): -1}}]}")
            Issue.record("accepted")
        } catch {
            #expect(error.path == "destinations[0].filter.\(key)")
        }
    }

    @Test func filterKeysParse() throws {
        let config = try Configuration.parse(
            #"{destinations: [{filter: {distanceMeters: 0, intervalSeconds: 60, angleDegrees: 30, stopDetection: false, heartbeatIntervalSeconds: 900, mode: "all"}}]}"#
        )
        let f = config.destinations[0].filter
        #expect(
            f.distanceMeters == 0 && f.intervalSeconds == 60 && f.angleDegrees == 30 && !f.stopDetection
                && f.heartbeatIntervalSeconds == 900 && f.mode == .all)
    }
}

/// The SDK's accuracy levels: a bound on the fixes a destination gets.
@Suite(.offThePool) struct AccuracyLevelTests {
    func settings(_ change: (inout FilterSettings) -> Void) -> LocationFilter {
        var s = FilterSettings()
        s.stopDetection = false
        change(&s)
        return LocationFilter(settings: s)
    }

    @Test func anAccuracyLevelDropsFixesWorseThanItsBoundAndForgetsThem() {
        let filter = settings {
            $0.accuracy = .medium
            $0.distanceMeters = 75
        }
        func at(_ second: Int64, north metres: Double, accuracy: Double?, alarm: String? = nil) -> Position {
            var p = fix(second, north: metres, alarm: alarm)
            p.accuracy = accuracy
            return p
        }
        // 0: a 500 m fix (dropped, and not remembered as the last sent); 1: 80 m, the first sent;
        // 2: 150 m away but judged 300 m inaccurate (dropped); 3: an alarm at 2 km accuracy (sent);
        // 4: no accuracy known (judged by the rules only: 200 m away, sent).
        let positions = [
            at(0, north: 0, accuracy: 500), at(1, north: 0, accuracy: 80), at(2, north: 150, accuracy: 300),
            at(3, north: 160, accuracy: 2000, alarm: "sos"), at(4, north: 400, accuracy: nil),
        ]
        #expect(run(filter, positions).sent == [1, 3, 4])
    }

    @Test func hdopTimesTheReceiversUEREJudgesFixesWithoutAnAccuracy() {
        let filter = settings {
            $0.accuracy = .high
            $0.accuracyPerHDOP = 5
            $0.distanceMeters = 0
            $0.intervalSeconds = 1
        }
        let positions = [1.2, 4.0, 1.8].enumerated().map { i, hdop in
            var p = fix(Int64(i) * 10)
            p.attributes = [Attribute("hdop", .number(hdop))]
            return p
        }
        // 6 m, 20 m (worse than the high level's 10 m), 9 m.
        #expect(run(filter, positions).sent == [0, 20])
    }

    @Test func accuracyLevelsAreReadAndAContradictingModeIsRefused() throws {
        let highest = try Configuration.parse(#"{destinations: [{filter: {accuracy: "highest"}}]}"#).destinations[0]
            .filter
        #expect(highest.mode == .all && highest.accuracy == .highest)
        let low = try Configuration.parse(
            #"{ingest: {nmea: {hdopAccuracyMeters: 4}}, destinations: [{filter: {accuracy: "low"}}]}"#
        ).destinations[0].filter
        #expect(low.mode == .filtered && low.accuracy?.boundMeters == 1000 && low.accuracyPerHDOP == 4)
        #expect(try Configuration.parse("{}").destinations[0].filter.accuracy == nil)
        do {
            _ = try Configuration.parse(#"{destinations: [{filter: {accuracy: "medium", mode: "all"}}]}"#)
            Issue.record("a medium accuracy with mode all was accepted")
        } catch {
            #expect("\(error)".contains("destinations[0].filter.accuracy"), "\(error)")
        }
        do {
            _ = try Configuration.parse(#"{destinations: [{filter: {accuracy: "best"}}]}"#)
            Issue.record("an unknown accuracy level was accepted")
        } catch {
            #expect("\(error)".contains(#"expected one of "highest", "high", "medium", "low""#), "\(error)")
        }
    }
}

import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// The test kit's model of Traccar's processing against the rules read in its source: what the
/// end-to-end tests assert through must itself be right.
@Suite(.offThePool) struct TraccarModelTests {
    /// A vessel's fix `second` seconds into a passage north at 5 m/s.
    func fix(_ second: Int64, arrivalMs: Int64 = 0, attributes: [String: AttributeValue] = [:]) -> TraccarModel.Arrival
    {
        TraccarModel.Arrival(
            device: "v", fixTimeMs: second * 1000, lat: 59 + Double(second) * 5 / 111_195, lon: 10,
            attributes: attributes, arrivalMs: arrivalMs)
    }

    @Test func historyAfterTheCurrentPositionIsSkippedAndMeasuredFromIt() {
        // The position before the outage, the current one, then the outage's history.
        let arrivals = [fix(0), fix(100)] + (1..<100).map { fix(Int64($0)) }
        let device = try! #require(TraccarModel(arrivals).devices["v"])
        #expect(device.skippedByEvents == 99)
        #expect(device.latest?.arrival.fixTimeMs == 100_000)
        // The current position's total is the chord across the outage; each history position's is
        // that total plus its distance back to the current position.
        let chord = device.processed[1].totalDistance
        #expect(abs(chord - 500) < 1)
        #expect(abs(device.processed[2].totalDistance - (chord + 495)) < 1)
        // The summary report over the outage, by fix time: last − first totalDistance, negative.
        let report = try! #require(device.reportDistance(fromMs: 1000, toMs: 99_000))
        #expect(report < -400)
    }

    /// A window sent again after its answers were lost: Traccar processes the copies, and every
    /// copy but the newest's is older than the latest; none of them was a first arrival.
    @Test func copiesSentAgainAreSkippedButNotFirstArrivals() {
        let device = try! #require(TraccarModel((0..<10).map { fix($0) } + (5..<10).map { fix($0) }).devices["v"])
        #expect(device.skippedByEvents == 4)
        #expect(device.firstArrivalsSkipped == 0)
        #expect(device.processed.count(where: \.duplicate) == 5)
    }

    @Test func inOrderNothingIsSkippedAndTheReportIsThePath() {
        let device = try! #require(TraccarModel((0...100).map { fix($0) }).devices["v"])
        #expect(device.skippedByEvents == 0)
        #expect(abs((device.reportDistance(fromMs: 0, toMs: 100_000) ?? 0) - 500) < 1)
    }

    @Test func theOdometerMakesTheReportRightInAnyOrderAndADistanceAttributeReplacesTheChord() {
        func withOdometer(_ second: Int64, distance: Double? = nil) -> TraccarModel.Arrival {
            var attributes: [String: AttributeValue] = ["odometer": .number(Double(second) * 5 + 1000)]
            if let distance { attributes["distance"] = .number(distance) }
            return fix(second, attributes: attributes)
        }
        // Current first, with the path's length as its `distance`.
        let arrivals = [withOdometer(0), withOdometer(100, distance: 500)] + (1..<100).map { withOdometer(Int64($0)) }
        let device = try! #require(TraccarModel(arrivals).devices["v"])
        #expect(abs((device.reportDistance(fromMs: 1000, toMs: 99_000) ?? 0) - 490) < 0.01)
        #expect(device.latest?.totalDistance == 500)
        // `report.ignoreOdometer` falls back on the chain, which the order broke.
        #expect((device.reportDistance(fromMs: 1000, toMs: 99_000, ignoreOdometer: true) ?? 0) < 0)
    }

    @Test func anAlarmBehindANewerPositionRaisesNothingAndARepeatedOneIsDropped() {
        let alarm: [String: AttributeValue] = ["alarm": .string("sos")]
        let model = TraccarModel([
            fix(10), fix(5, attributes: alarm), fix(11, attributes: alarm), fix(12, attributes: alarm),
        ])
        let device = try! #require(model.devices["v"])
        #expect(device.alarmsSkipped == 1)
        // The one at 11 raises its event; the one at 12 repeats the latest's alarm (ignoreDuplicateAlerts).
        #expect(device.processed.map(\.alarmEvents) == [[], [], ["sos"], []])
    }

    @Test func theBufferSortsWhatArrivesWithinItsThreshold() {
        // Current first, the history 100 ms apart behind it: Traccar 6.9's 3 s buffer releases all
        // in fix-time order; one arriving after a 4 s pause comes after the newer ones, as without it.
        let arrivals =
            [fix(100, arrivalMs: 0)] + (1..<50).map { fix(Int64($0), arrivalMs: Int64($0) * 100) }
            + [fix(50, arrivalMs: 9_000)]
        #expect(TraccarModel(arrivals, bufferingMs: 3_000).skippedByEvents == 1)
        #expect(TraccarModel(arrivals).skippedByEvents == 50)
    }
}

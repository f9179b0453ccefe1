import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// A stored position no encoder can carry (a field outside `PositionBounds`, written by an
/// older version or a bug): no encoder traps on it, and the plan quarantines it with the
/// reason while the rest of its device flows.
@Suite(.offThePool) struct UnsendablePositionTests {
    static let extremes: [Double] = [
        .nan, .infinity, -.infinity, 1e19, -1e19, .greatestFiniteMagnitude, -.greatestFiniteMagnitude,
        9.3e18, -9.3e18, 4e9, -4e9, 65_536, -0.0, .leastNonzeroMagnitude, 359.5, 720,
    ]
    static let times: [Int64] = [.min, .max, -1, 0, PositionBounds.latestTimeMs + 1, 1_784_953_800_000]

    /// Every field at every extreme through the OsmAnd form, the Teltonika record and frame, and
    /// a push point: nothing traps (a trap ends the test process, so reaching the end passes).
    @Test func noEncoderTrapsOnAnyStoredValue() {
        var settings = Configuration.DestinationSettings()
        settings.push = PushSettings()
        let push = PushProtocol(settings: settings)
        var encoded = 0
        for time in Self.times {
            for value in Self.extremes {
                let positions = [
                    Position(device: "d", timeMs: time, lat: value, lon: value),
                    Position(
                        device: "d", timeMs: time, lat: 1, lon: 1, speed: value, course: value, altitude: value,
                        accuracy: value, battery: value,
                        alarm: "sos",
                        attributes: ["hdop", "pdop", "power", "battery", "odometer", "rssi", "sat", "ignition", "x"].map
                        { Attribute($0, .number(value)) }),
                ]
                for position in positions {
                    _ = OsmAndQuery.encode(position)
                    _ = TeltonikaCodec.dataFrame(records: [TeltonikaCodec.record(from: position)])
                    let point = push.encodePoint(position)
                    _ = push.encodeBatch([point])
                    encoded += 1
                }
            }
        }
        #expect(encoded == Self.times.count * Self.extremes.count * 2)
    }

    /// The course of 1e19 that crash-looped the relay in the Teltonika encoder now folds.
    @Test func aHugeCourseFoldsInTheTeltonikaRecord() {
        #expect(TeltonikaCodec.record(from: Position(device: "d", timeMs: 0, lat: 0, lon: 0, course: 1e19)).angle < 360)
        #expect(
            TeltonikaCodec.record(from: Position(device: "d", timeMs: 0, lat: 0, lon: 0, course: -1e19)).angle < 360)
    }

    @Test func thePlanQuarantinesWhatNoEncoderCanCarryAndTheRestFlows() {
        func stored(_ seq: Int64, course: Double? = nil, time: Int64 = 1_784_953_800_000) -> StoredPosition {
            StoredPosition(
                seq: seq, deviceID: 1, receivedMs: 0,
                position: Position(
                    device: "d1", timeMs: time + seq * 60_000, lat: 59 + Double(seq) / 100, lon: 10, course: course))
        }
        var ledger = DeliveryLedger(destination: "traccar")
        var update = DeliveryUpdate(destination: "traccar")
        let filter = LocationFilter(settings: FilterSettings())
        // Leading: settled at once. Between two sends: quarantined, passed over with the send before it.
        let sends = ledger.plan(
            [stored(1, course: 1e19), stored(2), stored(3, course: .nan), stored(4), stored(5, time: .max / 2)],
            filter: filter, alreadySent: [], traccarAttributes: true, into: &update)
        #expect(sends.map(\.stored.seq) == [2, 4])
        #expect(sends.map(\.ackThrough) == [3, 5])
        // Recorded without moving the cursor (it passes them with the send before them: moved to 5
        // now, it would settle 2 and 4 unsent).
        #expect(update.quarantinedUnreached.map(\.seq) == [1, 3, 5])
        #expect(update.quarantinedUnreached.first?.reason == "not sent: course 1e+19 outside -360...720")
        #expect(update.quarantined.isEmpty)
        #expect(update.acknowledged.map(\.seq) == [1], "the leading one settled at once")
        // Nor does one go ahead of its backlog as an alarm.
        var alarm = stored(6, course: .infinity)
        alarm.position.alarm = "sos"
        #expect(ledger.alarms((unsent: [alarm], sent: [])).ahead.isEmpty)
    }
}

/// Alarms bypass a spent budget, at most `maxAlarmsPerDeviceHour` a device in any hour.
@Suite(.offThePool) struct AlarmAllowanceTests {
    func alarm(_ seq: Int64, device: Int64) -> Delivery {
        Delivery(
            stored: StoredPosition(
                seq: seq, deviceID: device, receivedMs: 0,
                position: Position(
                    device: "d\(device)", timeMs: 1_784_953_800_000 + seq * 1000, lat: 1, lon: 1, alarm: "sos")),
            ackThrough: seq, stateAfter: FilterState(), kind: .ahead)
    }

    @Test func aDeviceRaisingAnAlarmASecondSpendsAtMostItsAllowance() {
        let allowance = AlarmAllowance()
        let flood = (1...20).map { alarm(Int64($0), device: 1) } + [alarm(100, device: 2)]
        let first = allowance.take(flood, perDeviceHour: 12, nowMs: 0)
        #expect(first.filter { $0.deviceID == 1 }.count == 12)
        #expect(first.contains { $0.deviceID == 2 }, "another device keeps its own allowance")
        #expect(allowance.take([alarm(21, device: 1)], perDeviceHour: 12, nowMs: 3_599_999).isEmpty)
        #expect(
            allowance.take([alarm(22, device: 1)], perDeviceHour: 12, nowMs: 3_600_000).count == 1,
            "an hour on, the first have aged out")
        #expect(
            allowance.take([alarm(23, device: 3)], perDeviceHour: 0, nowMs: 0).isEmpty,
            "0: no alarm bypasses the budget")
    }
}

/// A round is bounded by what is left of a budget over what a position costs, learnt from
/// what hand-overs billed against what they settled, summed: a pipelined round's requests are
/// billed before their answers settle them.
@Suite(.offThePool) struct BudgetWindowTests {
    @Test func theCostIsWhatWasBilledOverWhatWasSettledNotAHandOversOwnRatio() {
        let window = BudgetWindow()
        let meter = WireMeter()
        #expect(window.positions(fitting: nil, meter: meter) == .max)
        #expect(window.positions(fitting: 10_416, meter: meter) == 10, "1,000 B a position until some are settled")
        // A pipelined round at 9.6 kbit/s: requests billed first (150 B each), answers after (100 B each).
        window.observe(billed: 100 * 150, positions: 0)
        window.observe(billed: 100 * 100, positions: 100)
        #expect(abs(window.costPerPosition - 250) < 1, "\(window.costPerPosition)")
        #expect(window.positions(fitting: 25_416, meter: meter) == 100)
        #expect(window.positions(fitting: 10, meter: meter) == 1, "a little left still moves one")
    }

    /// What the meter billed since its last hand-over (here a name lookup) is not left to spend.
    @Test func whatTheMeterBilledSinceItsLastHandOverIsSpent() throws {
        let window = BudgetWindow()
        window.observe(billed: 100 * 250, positions: 100)
        let meter = WireMeter()
        let name = "georelay-budget-test.invalid"
        _ = try? CurlEasy(meter: meter).perform(
            HTTPRequest(method: "GET", url: "http://\(name):9/", connectTimeoutSeconds: 2))
        let lookup = LookupBill.bytes(host: Substring(name))
        #expect(meter.unbilled() == lookup)
        #expect(window.positions(fitting: 25_416 + Int64(lookup), meter: meter) == 100)
        #expect(window.positions(fitting: 25_416, meter: meter) == 98)
    }
}

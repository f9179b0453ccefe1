import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestTraits
import Testing

@testable import GeoRelayForward

/// What each outcome settles, the same for every engine (one request, a pipelined window, a
/// Teltonika frame): without sockets, one answer at a time.
@Suite(.offThePool) struct SettlementTests {
    /// Four backlog positions of device 1 (seqs 11–14), the device parked or not.
    static func batch(parked: Bool) -> DeviceBatch {
        let deliveries = (11...14).map { seq in
            Delivery(
                stored: DeliveryLedgerTests.stored(Int64(seq), second: Int64(seq)), ackThrough: Int64(seq),
                stateAfter: FilterState())
        }
        return DeviceBatch(
            cursor: DeviceCursor(
                deviceID: 1, device: "d1", ackedSeq: 10, lastSeq: 14, parkedUntilMs: parked ? 1 : nil, pending: 4),
            deliveries: deliveries)
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var outcome: DeliveryOutcome
        var indices: Range<Int>
        var parked: Bool
        var settled: Settled
        var delivered: Int
        var acknowledgedThrough: Int64?
        var quarantined: [Int64]
        /// Park changes recorded: a park (until set) or an unpark (nil).
        var parks: [Bool]
        var unavailable: Bool
        var testDescription: String { "\(outcome) \(indices) parked \(parked)" }
    }

    static let cases: [Case] = [
        // A frame of three taken: each settled, the cursor through the last.
        Case(
            outcome: .delivered, indices: 0..<3, parked: false, settled: .goesOn, delivered: 3,
            acknowledgedThrough: 13, quarantined: [], parks: [], unavailable: false),
        // A parked device's first position taken: known again, once, whatever the frame's size.
        Case(
            outcome: .delivered, indices: 1..<4, parked: true, settled: .goesOn, delivered: 3,
            acknowledgedThrough: 14, quarantined: [], parks: [false], unavailable: false),
        Case(
            outcome: .rejected("HTTP 400"), indices: 0..<2, parked: false, settled: .goesOn, delivered: 0,
            acknowledgedThrough: 12, quarantined: [11, 12], parks: [], unavailable: false),
        // An unknown device: parked at its first position, nothing settled.
        Case(
            outcome: .unknownDevice("HTTP 404"), indices: 0..<4, parked: false, settled: .deviceParked,
            delivered: 0, acknowledgedThrough: nil, quarantined: [], parks: [true], unavailable: false),
        // Unavailable: nothing settled, the round stops.
        Case(
            outcome: .unavailable("timed out", retryAfter: nil, transport: true), indices: 0..<4, parked: false,
            settled: .destinationFailed, delivered: 0, acknowledgedThrough: nil, quarantined: [], parks: [],
            unavailable: true),
    ]

    @Test(arguments: cases)
    func anOutcomeSettles(_ c: Case) {
        var ledger = DeliveryLedger(destination: "traccar")
        var update = DeliveryUpdate(destination: "traccar")
        let batch = Self.batch(parked: c.parked)
        var result = DeviceResult(deviceID: 1)
        let settled = ledger.settle(
            c.outcome, c.indices, of: batch, result: &result, parkSeconds: 600, logger: .disabled, into: &update)
        #expect(settled == c.settled)
        #expect(result.delivered == c.delivered)
        #expect(update.sent == c.delivered)
        #expect(update.acknowledged.map(\.seq).max() == c.acknowledgedThrough)
        #expect(update.quarantined.map(\.seq) == c.quarantined)
        #expect(update.parked.map { $0.untilMs != nil } == c.parks)
        #expect((result.unavailable != nil) == c.unavailable)
    }

    /// A second answer in the same round for a device unparked by the first does not unpark again.
    @Test func aParkedDeviceIsUnparkedOncePerRound() {
        var ledger = DeliveryLedger(destination: "traccar")
        var update = DeliveryUpdate(destination: "traccar")
        let batch = Self.batch(parked: true)
        var result = DeviceResult(deviceID: 1)
        for index in 0..<4 {
            _ = ledger.settle(
                .delivered, index..<(index + 1), of: batch, result: &result, parkSeconds: 600, logger: .disabled,
                into: &update)
        }
        #expect(update.parked.count == 1 && update.parked[0].untilMs == nil)
        #expect(result.delivered == 4)
    }
}

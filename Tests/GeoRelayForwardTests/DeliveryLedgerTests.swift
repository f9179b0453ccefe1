import GeoRelayTestTraits
import Testing
import GeoRelayCore
import GeoRelaySpool
@testable import GeoRelayForward

/// What the ledger sends ahead of a backlog: alarms it has not had, and under a spent budget the
/// still-alive minimum, judged against what it settled before the spool shows it.
@Suite(.offThePool) struct DeliveryLedgerTests {
    static func stored(_ seq: Int64, device: Int64 = 1, second: Int64, alarm: String? = nil) -> StoredPosition {
        StoredPosition(seq: seq, deviceID: device, receivedMs: 0,
                       position: Position(device: "d\(device)", timeMs: 1_784_953_800_000 + second * 1000, lat: 59, lon: 10, alarm: alarm))
    }

    /// The spool still lists an alarm its backlog turn delivered (acknowledgements are held
    /// state): it is not sent ahead a second time.
    @Test func anAlarmSettledInItsTurnIsNotSentAheadAgain() {
        var ledger = DeliveryLedger(destination: "traccar")
        let alarm = Self.stored(3, second: 3, alarm: "sos")
        var update = DeliveryUpdate(destination: "traccar")
        ledger.delivered(Delivery(stored: Self.stored(4, second: 4), ackThrough: 4, stateAfter: FilterState()), into: &update)
        #expect(ledger.alarms((unsent: [alarm], sent: [])).ahead.isEmpty)
        // Another device's alarm is still owed.
        let other = Self.stored(5, device: 2, second: 5, alarm: "sos")
        #expect(ledger.alarms((unsent: [alarm, other], sent: [])).ahead.map(\.stored.seq) == [5])
    }

    @Test func theStillAliveMinimumIsCountedInDeviceTimeFromTheNewestTheServerHas() {
        var ledger = DeliveryLedger(destination: "traccar")
        // Nothing sent yet: the newest goes.
        #expect(ledger.stillAlive([Self.stored(9, second: 100)], minIntervalMs: 60_000, sent: []).map(\.stored.seq) == [9])
        var update = DeliveryUpdate(destination: "traccar")
        let first = ledger.stillAlive([Self.stored(9, second: 100)], minIntervalMs: 60_000, sent: [])[0]
        #expect(first.kind == .ahead)
        ledger.delivered(first, into: &update)
        #expect(update.sentAhead == [9], "recorded, so the backlog skips it")
        #expect(update.acknowledged.isEmpty, "nothing settled")
        // Once sent, not again; 59 s on, not due; 60 s on, due.
        #expect(ledger.stillAlive([Self.stored(9, second: 100)], minIntervalMs: 60_000, sent: []).isEmpty)
        #expect(ledger.stillAlive([Self.stored(10, second: 159)], minIntervalMs: 60_000, sent: []).isEmpty)
        #expect(ledger.stillAlive([Self.stored(11, second: 160)], minIntervalMs: 60_000, sent: []).map(\.stored.seq) == [11])
        // An older fix arriving late (a phone's backlog) is not where the vessel is now.
        #expect(ledger.stillAlive([Self.stored(12, second: 10)], minIntervalMs: 60_000, sent: []).isEmpty)
    }
}

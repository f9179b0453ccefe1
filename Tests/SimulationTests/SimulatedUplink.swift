import GeoRelayCore
import GeoRelaySpool
import Synchronization

@testable import GeoRelayForward

/// The far side of a simulated voyage's uplink: whether the satellite is there, and the Traccar
/// server behind it, which keeps each position it took in the order it came.
final class SimulatedServer: Sendable {
    private struct State {
        var up = true
        /// Per device, the fix times in order of arrival.
        var arrivals: [String: [Int64]] = [:]
        var positions = 0
        var rounds = 0
        /// Bytes carried since the last `takeDayBytes`, and of them those carried while the budget
        /// was spent (alarms and still-alive positions).
        var dayBytes: Int64 = 0
        var restrictedBytes: Int64 = 0
    }

    private let state = Mutex(State())

    var up: Bool {
        get { state.withLock { $0.up } }
        set { state.withLock { $0.up = newValue } }
    }

    var arrivals: [String: [Int64]] { state.withLock { $0.arrivals } }
    var positions: Int { state.withLock { $0.positions } }
    /// Rounds begun (a quiescent relay begins none).
    var rounds: Int { state.withLock { $0.rounds } }

    func roundBegan() { state.withLock { $0.rounds += 1 } }

    /// The link carried `bytes`, under a spent budget or not: the interface's count.
    func carried(_ bytes: Int, restricted: Bool) {
        state.withLock { state in
            state.dayBytes += Int64(bytes)
            if restricted { state.restrictedBytes += Int64(bytes) }
        }
    }

    /// What the link carried since the last call, and of it what went under a spent budget.
    func takeDayBytes() -> (all: Int64, restricted: Int64) {
        state.withLock { state in
            defer { (state.dayBytes, state.restrictedBytes) = (0, 0) }
            return (state.dayBytes, state.restrictedBytes)
        }
    }

    func take(_ deliveries: ArraySlice<Delivery>) {
        state.withLock { state in
            for delivery in deliveries {
                state.arrivals[delivery.device, default: []].append(delivery.stored.position.timeMs)
            }
            state.positions += deliveries.count
        }
    }

    /// A probe's answer: the server's own while the link is up, nothing while it is down (the
    /// terminal refuses).
    func probe() -> ServerCheck.Answer { up ? .server : .nothing }
}

/// Traccar's OsmAnd port as an engine meets it over the simulated uplink: while the link is down
/// a round fails at its first device, as against a refusing terminal; while it is up every
/// position of every batch is taken, in order, within the round's limit.
final class SimulatedEngine: TraccarEngine {
    private let server: SimulatedServer
    private let destination: String
    private let parkSeconds: Double
    private let logger: Logger
    /// The destination's meter: what the link carries is billed there, as the kernel's counts are.
    private let meter: WireMeter
    /// Whether the uplink's budget is spent now (its traffic is counted apart).
    private let restricted: @Sendable () -> Bool
    /// What a position costs the link (about an OsmAnd request and its answer, headers and all).
    static let bytesPerPosition = 200

    init(
        server: SimulatedServer, destination: String, parkSeconds: Double, logger: Logger, meter: WireMeter,
        restricted: @escaping @Sendable () -> Bool
    ) {
        self.restricted = restricted
        self.server = server
        self.destination = destination
        self.parkSeconds = parkSeconds
        self.logger = logger
        self.meter = meter
    }

    var wake: @Sendable () -> Void { {} }

    func closeConnections() {}

    func deliver(_ round: EngineRound, ledger: inout DeliveryLedger, progress: (DeliveryUpdate) -> Void)
        -> [DeviceResult]
    {
        server.roundBegan()
        var results = round.batches.map { DeviceResult(deviceID: $0.cursor.deviceID) }
        var left = round.maxPositions
        for (index, batch) in round.batches.enumerated() {
            guard !round.stop.isSet, round.yield?.isSet != true, left > 0, !batch.deliveries.isEmpty else { break }
            var update = DeliveryUpdate(destination: destination)
            defer { progress(update) }
            guard server.up else {
                _ = ledger.settle(
                    .unavailable("connection refused", retryAfter: nil, transport: true), 0..<1, of: batch,
                    result: &results[index], parkSeconds: parkSeconds, logger: logger, into: &update)
                break
            }
            let count = min(batch.deliveries.count, left)
            server.take(batch.deliveries.prefix(count))
            _ = ledger.settle(
                .delivered, 0..<count, of: batch, result: &results[index], parkSeconds: parkSeconds, logger: logger,
                into: &update)
            update.payloadBytes = count * Self.bytesPerPosition
            meter.bill(count * Self.bytesPerPosition)
            server.carried(count * Self.bytesPerPosition, restricted: restricted())
            left -= count
        }
        return results
    }
}

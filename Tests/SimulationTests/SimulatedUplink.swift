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
    /// What a position costs the link, for the recorder's payload count.
    static let bytesPerPosition = 200

    init(server: SimulatedServer, destination: String, parkSeconds: Double, logger: Logger) {
        self.server = server
        self.destination = destination
        self.parkSeconds = parkSeconds
        self.logger = logger
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
            left -= count
        }
        return results
    }
}

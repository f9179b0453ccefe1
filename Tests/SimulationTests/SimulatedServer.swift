import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import Synchronization

@testable import GeoRelayForward

/// The far side of a simulated voyage's uplinks: whether the link is there, what each uplink
/// carried as its interface counts it, and the Traccar server behind it, which keeps each
/// position it took in the order it came.
final class SimulatedServer: Sendable {
    /// What an uplink carried in one period (a day or a month, as the relay's clock names it).
    struct Carried: Equatable {
        var all: Int64 = 0
        /// Carried while the budget was spent: alarms and still-alive positions, by design.
        var restricted: Int64 = 0
        /// Of `restricted`, what push's meter counted (the rest is Traccar's).
        var restrictedPush: Int64 = 0
        /// Positions carried a second time while the budget was not spent: what a crash made the
        /// relay send again (its record of the first time died with it).
        var again: Int64 = 0
    }

    private struct State {
        var up = true
        /// In a maintenance window: every request answered 503.
        var unavailable = false
        var answered503 = 0
        var uplink = SimulatedUplinks.satelliteName
        /// The simulation's step, for when alarms arrive.
        var step = 0
        /// Each device's arrivals against what was stored, in the order Traccar reads right.
        var order = DeliveryOrder.Follower()
        /// Per device, the fixes a restore from a backup lost, until they arrive again.
        var lost: [String: Set<Int64>] = [:]
        /// Positions taken that `georelay replay` had queued.
        var replays = 0
        /// Each alarm's fix time, with the step it first arrived in.
        var alarms: [Int64: Int] = [:]
        var positions = 0
        var rounds = 0
        /// Per uplink and period (`YYYY-MM-DD` or `YYYY-MM`), what it carried.
        var carried: [String: [String: Carried]] = [:]
        /// The spool's number of each position taken in the last few hundred steps, with its step:
        /// a repeat is sent again soon after a crash, not days later.
        var recent: [Int64: Int] = [:]
    }

    private let state = Mutex(State())

    var up: Bool {
        get { state.withLock { $0.up } }
        set { state.withLock { $0.up = newValue } }
    }

    var order: DeliveryOrder.Follower { state.withLock { $0.order } }

    /// The server is restored from a backup: `fixes` (per device) it had taken since are gone
    /// and must arrive again.
    func restored(losing fixes: [String: Set<Int64>]) {
        state.withLock { state in state.lost.merge(fixes) { $0.union($1) } }
    }

    var replays: Int { state.withLock { $0.replays } }

    /// Per device, fixes a restore lost that have not arrived again.
    var lost: [String: Set<Int64>] { state.withLock { $0.lost.filter { !$0.value.isEmpty } } }

    /// `fix` of `device` goes to the relay now: it is to arrive.
    func expect(_ device: String, _ fix: Int64) { state.withLock { $0.order.expect(device, fix) } }
    func forget(_ device: String, _ fix: Int64) { state.withLock { $0.order.forget(device, fix) } }
    var positions: Int { state.withLock { $0.positions } }
    /// Rounds begun (a quiescent relay begins none).
    var rounds: Int { state.withLock { $0.rounds } }

    /// Requests answered 503.
    var answered503: Int { state.withLock { $0.answered503 } }

    /// Whether the server answers everything 503 (a maintenance window).
    var unavailable: Bool {
        get { state.withLock { $0.unavailable } }
        set { state.withLock { $0.unavailable = newValue } }
    }

    func refused() { state.withLock { $0.answered503 += 1 } }

    /// The uplink the relay's traffic takes now.
    var uplink: String {
        get { state.withLock { $0.uplink } }
        set { state.withLock { $0.uplink = newValue } }
    }

    var step: Int {
        get { state.withLock { $0.step } }
        set {
            state.withLock { state in
                state.step = newValue
                if newValue % 100 == 0 { state.recent = state.recent.filter { $0.value >= newValue - 300 } }
            }
        }
    }

    /// Each alarm's fix time, with the step it first arrived in.
    var alarmArrivals: [Int64: Int] { state.withLock { $0.alarms } }

    /// Per uplink and period (`YYYY-MM-DD` or `YYYY-MM`), what it carried.
    var carried: [String: [String: Carried]] { state.withLock { $0.carried } }

    func roundBegan() { state.withLock { $0.rounds += 1 } }

    /// `deliveries` crossed `uplink` on the relay's day `day`, `bytesPerPosition` each, under a
    /// spent budget or not: the interface's count, tallied by the day and the month.
    func carried(
        _ deliveries: ArraySlice<Delivery>, bytesPerPosition: Int, uplink: String, day: String, restricted: Bool
    ) {
        state.withLock { state in
            // A replay is sent again on purpose (`georelay replay`), and budgeted as any sending.
            let again = deliveries.filter { $0.kind != .replay && state.recent[$0.stored.seq] != nil }.count
            for period in [day, String(day.prefix(7))] {
                var carried = state.carried[uplink, default: [:]][period, default: Carried()]
                carried.all += Int64(deliveries.count * bytesPerPosition)
                if restricted {
                    carried.restricted += Int64(deliveries.count * bytesPerPosition)
                } else {
                    carried.again += Int64(again * bytesPerPosition)
                }
                state.carried[uplink, default: [:]][period] = carried
            }
        }
    }

    /// `bytes` crossed `uplink` by a destination's own count (push's meter).
    func carried(bytes: Int64, uplink: String, day: String, restricted: Bool, push: Bool = false) {
        guard bytes > 0 else { return }
        state.withLock { state in
            for period in [day, String(day.prefix(7))] {
                var carried = state.carried[uplink, default: [:]][period, default: Carried()]
                carried.all += bytes
                if restricted {
                    carried.restricted += bytes
                    if push { carried.restrictedPush += bytes }
                }
                state.carried[uplink, default: [:]][period] = carried
            }
        }
    }

    func take(_ deliveries: ArraySlice<Delivery>) {
        state.withLock { state in
            for delivery in deliveries {
                let position = delivery.stored.position
                state.order.arrived(delivery.device, position.timeMs)
                if delivery.kind == .replay { state.replays += 1 }
                state.lost[delivery.device]?.remove(position.timeMs)
                state.recent[delivery.stored.seq] = state.step
                if position.alarm != nil, state.alarms[position.timeMs] == nil {
                    state.alarms[position.timeMs] = state.step
                }
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
    /// The uplink the traffic takes now, the relay's day, and whether its budget is spent now.
    private let route: @Sendable () -> (uplink: String, day: String, restricted: Bool)
    /// What a position costs the link (about an OsmAnd request and its answer, headers and all).
    static let bytesPerPosition = 200

    init(
        server: SimulatedServer, destination: String, parkSeconds: Double, logger: Logger, meter: WireMeter,
        route: @escaping @Sendable () -> (uplink: String, day: String, restricted: Bool)
    ) {
        self.route = route
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
            if server.unavailable {
                // The first request is answered 503 with a Retry-After, as Traccar behind a
                // proxy during an upgrade is; what it cost the link is billed like any answer.
                _ = ledger.settle(
                    .unavailable("HTTP 503", retryAfter: 120, transport: false), 0..<1, of: batch,
                    result: &results[index], parkSeconds: parkSeconds, logger: logger, into: &update)
                meter.bill(Self.bytesPerPosition)
                server.refused()
                let (uplink, day, restricted) = route()
                server.carried(bytes: Int64(Self.bytesPerPosition), uplink: uplink, day: day, restricted: restricted)
                break
            }
            let count = min(batch.deliveries.count, left)
            let (uplink, day, restricted) = route()
            server.carried(
                batch.deliveries.prefix(count), bytesPerPosition: Self.bytesPerPosition, uplink: uplink, day: day,
                restricted: restricted)
            server.take(batch.deliveries.prefix(count))
            _ = ledger.settle(
                .delivered, 0..<count, of: batch, result: &results[index], parkSeconds: parkSeconds, logger: logger,
                into: &update)
            update.payloadBytes = count * Self.bytesPerPosition
            meter.bill(count * Self.bytesPerPosition)
            left -= count
        }
        return results
    }
}

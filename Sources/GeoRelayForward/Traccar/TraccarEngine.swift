import GeoRelayCore
import GeoRelaySpool

/// One device's deliveries for one round, in the order they must reach the server.
struct DeviceBatch: Sendable {
    var cursor: DeviceCursor
    var deliveries: [Delivery]
    /// Until the server has taken one of them (it knows the device), at most this many of the
    /// batch's requests on the wire (`DeliveryLedger.window`); nil: no bound.
    var unproven: Int? = nil
}

extension DeviceBatch {
    /// Deliveries of one device that move no cursor (a replay, positions still-alive or joining a
    /// round): their cursor is settled by what sent them.
    init(untracked deliveries: [Delivery]) {
        let first = deliveries[0]
        self.init(
            cursor: DeviceCursor(
                deviceID: first.deviceID, device: first.device, ackedSeq: 0, lastSeq: 0, parkedUntilMs: nil),
            deliveries: deliveries)
    }
}

/// What a round did for one device.
struct DeviceResult: Sendable {
    var deviceID: Int64
    var delivered = 0
    var attempted = 0
    /// Set when the destination proved unavailable while this device was sending.
    var unavailable: DeliveryOutcome?
    /// Requests dropped unanswered because the forwarder was abandoned: the server may have them.
    var abandoned = 0
}

/// One round as the forwarder asks an engine for it.
struct EngineRound {
    var batches: [DeviceBatch]
    var mode: DeliveryMode
    /// At most this many positions go out (a trial after backing off sends one); their retries
    /// and canaries do not count.
    var maxPositions: Int
    /// Set: what is in flight is abandoned and the round ends at once.
    var stop: AbortFlag
    /// Set: no new request starts and the round ends once those in flight are answered (an alarm
    /// to send ahead, or the forwarder finishing); a position's retry and its canary still go, as
    /// they settle what is already on the wire.
    var yield: AbortFlag?
    /// Live fixes committed during the round, to go ahead of the rest of it (a pipelined OsmAnd
    /// round of history); nil: the round does not take them.
    var live: LiveJoin? = nil
}

/// How a round treats what the server answers.
enum DeliveryMode {
    /// Quarantine refused payloads, park unknown devices, stop at the first sign of an outage.
    case buffered
    /// Try each position once and go on whatever happens (`buffer: false`).
    case realTime
}

/// Runs rounds of deliveries to Traccar on one thread (a `QueueConfined` serial queue): OsmAnd
/// requests in the engine's own HTTP/1.1 framing, a window of them per connection
/// (`OsmAndEngine`; a window of one for `pipeline: 1`), or Teltonika frames
/// on one connection per device (`TeltonikaEngine`). Each owns its wire format, its park time,
/// its logger and its clock, set up once for its destination; the forwarder hands it rounds and
/// a ledger.
protocol TraccarEngine: AnyObject {
    /// Runs one round to its end (or until its `stop` is set, abandoning what is in flight),
    /// handing what it settles to `progress` as it goes.
    func deliver(_ round: EngineRound, ledger: inout DeliveryLedger, progress: (DeliveryUpdate) -> Void)
        -> [DeviceResult]

    /// Wakes a running round so it sees its flags; may be called from any thread.
    var wake: @Sendable () -> Void { get }

    /// Closes every kept-alive connection (between rounds, nothing in flight): the next round
    /// connects anew, over the route the traffic takes now.
    func closeConnections()
}

/// When a round hands what it settled to `progress`: every 128 positions settled (a crash
/// mid-round resends little), or a second after the last hand-over once bytes went on the wire,
/// so the uplink monitor and a budget's allowance see a slow link's bytes within a second, not
/// 128 positions (25 KB at 9.6 kbit/s, minutes of Iridium) later. The end of a round forces one.
struct ProgressCadence {
    static let positions = 128
    static let interval: Duration = .seconds(1)
    private var last: RelayInstant

    /// - Parameter now: when the round began.
    init(now: RelayInstant) {
        last = now
    }

    mutating func due(_ update: DeliveryUpdate, force: Bool = false, now: RelayInstant) -> Bool {
        guard
            force || update.acknowledged.count + update.quarantined.count >= Self.positions
                || (update.payloadBytes > 0 && now - last >= Self.interval)
        else { return false }
        last = now
        return true
    }
}

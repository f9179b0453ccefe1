import GeoRelayCore
import GeoRelaySpool

/// Sends a push destination's rounds (`PushRound`) on one thread, through the driver every
/// transport shares (`RoundDriver`): it keeps the connection and what the rounds carry from one
/// to the next (what the gateway showed of keep-alive, the link's measured depth, the encoding
/// and batch size its answers left), and holds a round while its caller prepares what it asked for.
final class PushEngine {
    private let driver: RoundDriver<Int>
    private let setup: PushRound.Setup
    private var carried: PushRound.Carried
    private var round: PushRound?
    private var ledger = DeliveryLedger(destination: "")

    init(
        settings: Configuration.DestinationSettings, state: PushForwarder.DeliveryState, meter: WireMeter?,
        logger: Logger, spare: SpareConnection?, network: (any RoundNetwork)? = nil, clock: any RelayClock
    ) throws {
        driver = try RoundDriver(for: settings, meter: meter, spare: spare, network: network, clock: clock)
        setup = PushRound.Setup(
            destination: settings.name, wire: PushProtocol(settings: settings),
            target: try HTTP1Target(url: settings.url), requestTimeout: settings.requestTimeout, logger: logger)
        carried = PushRound.Carried(
            depth: PipelineDepth(ceiling: (settings.push ?? PushSettings()).batchInFlight), state: state)
    }

    var wake: @Sendable () -> Void { driver.wake }

    /// The encoding and batch size the gateway's answers have left, and the compression planner.
    var state: PushForwarder.DeliveryState {
        get { round?.state ?? carried.state }
        set { carried.state = newValue }
    }

    /// What the gateway showed of keep-alive (nil: nothing yet).
    var keepsAlive: Bool? { (round?.carried ?? carried).keepsAlive }

    /// The path's round trip as the depth has measured it.
    var roundTrip: Duration? { (round?.carried ?? carried).depth.roundTrip }

    /// Begins a round with `first`, settling into `ledger`.
    func begin(_ first: PushRound.Batch, token: String, ledger: DeliveryLedger, refill: PushRound.Refill) {
        self.ledger = ledger
        round = PushRound(
            first, token: token, setup: setup, carried: carried, connected: driver.keptOpen().contains(0),
            refill: refill, now: driver.clock.now())
    }

    /// Runs the round until it ends (nil) or needs its caller (`supply`).
    func drive(stop: AbortFlag, yield: AbortFlag, progress: (DeliveryUpdate) -> Void) -> PushRound.Need? {
        guard var current = round else { return nil }
        let finished = driver.run(
            &current, ledger: &ledger, stop: stop, yield: yield, progress: progress)
        round = current
        return finished ? nil : current.need
    }

    func supply(_ supply: PushRound.Supply) {
        round?.supply(supply, ledger: &ledger)
    }

    /// The round's outcome and the ledger it settled into; the round's state is carried on.
    func end() -> (PushRound.Outcome, DeliveryLedger) {
        guard let finished = round else { return (PushRound.Outcome(), ledger) }
        carried = finished.carried
        round = nil
        return (finished.outcome, ledger)
    }

    /// The route moved: a new connection, and the new path's depth measured anew.
    func closeConnections() {
        driver.closeAll()
        carried.lane.close()
        carried.depth.reset()
    }

    /// The path may not be the one that comes back: its depth is measured anew.
    func linkFailed() {
        carried.depth.reset()
    }
}

@available(*, unavailable)
extension PushEngine: Sendable {}

import GeoRelayCore

/// A connection as the link carries it.
struct LinkConnection {
    let server: SimulatedServer
    var session: (any SimulatedSession)?
    /// Arrived and not read by the client.
    var inbox: [UInt8] = []
    var peerClosed = false
    /// Set: every call fails with it (a reset).
    var failure: String?
    /// Bytes written, each write with when its last byte leaves the sending end.
    var unsent: [(leaves: RelayInstant, count: Int)] = []
    /// Accepted on board by a `hold` terminal, not yet across the link; what it was sent meanwhile.
    var heldOpen = false
    var heldOutput: [UInt8] = []
    /// A `drop` terminal's: nothing crosses either way, ever again.
    var silenced = false
    var serverClosed = false
    var lingering = false
    var clientClosed = false
    var lastReplyAt = RelayInstant.origin
    /// Begun by `SimulatedConnector.connect`, its handshake not over; `neverOpened`: it failed.
    var handshaking = false
    var neverOpened = false
    /// A handshake the link loses: when the SYN goes again, and until when.
    var retries: Retries?

    struct Retries {
        var next: RelayInstant
        var backoff: Duration
        let deadline: RelayInstant
        let timeout: Duration
    }

    init(server: SimulatedServer) {
        self.server = server
    }

    var isFinished: Bool { failure != nil || clientClosed }

    /// What the send buffer takes now.
    func room(at now: RelayInstant) -> Int {
        max(0, SimulatedNetwork.sendBuffer - unsent.lazy.filter { $0.leaves > now }.reduce(0) { $0 + $1.count })
    }
}

/// Something that happens on the link at an instant.
struct LinkEvent {
    var at: RelayInstant
    var kind: Kind

    enum Kind {
        /// The handshake reached the server.
        case accept(Int)
        case toServer(Int, [UInt8])
        /// The server's answer leaves it (after its processing time).
        case serverSends(Int, [UInt8])
        case serverCloses(Int, lingering: Bool, reset: Bool)
        case toClient(Int, [UInt8])
        case finToClient(Int)
        case resetToClient(Int)
        /// A handshake `connect` began: over, failed, or its SYN to go again.
        case handshake(Int, Handshake)
    }

    enum Handshake {
        case done
        case failed(String)
        case retry
    }

    /// Arriving at one end from the other (what a satellite that is down holds or loses), not
    /// something a server does on its own side.
    var crossesTheLink: Bool {
        switch kind {
        case .serverSends, .serverCloses, .handshake: false
        default: true
        }
    }

    func retimed(_ instant: RelayInstant) -> LinkEvent { LinkEvent(at: instant, kind: kind) }
}

/// Events in time order, those at the same instant in the order they were pushed.
struct EventQueue {
    private var events: [(event: LinkEvent, order: Int)] = []
    private var pushed = 0

    var first: LinkEvent? { events.first?.event }

    mutating func push(_ event: LinkEvent) {
        pushed += 1
        // After every event at or before its instant: binary search for the first one later.
        var low = 0
        var high = events.count
        while low < high {
            let middle = (low + high) / 2
            if events[middle].event.at <= event.at { low = middle + 1 } else { high = middle }
        }
        events.insert((event, pushed), at: low)
    }

    mutating func popDue(_ now: RelayInstant) -> LinkEvent? {
        guard let first = events.first, first.event.at <= now else { return nil }
        return events.removeFirst().event
    }
}

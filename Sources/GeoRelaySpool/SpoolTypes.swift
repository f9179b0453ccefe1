import GeoRelayCore

/// What the spool did with one position handed to `append`.
package enum AppendResult: Sendable, Equatable {
    /// Stored as a new row, committed and synced.
    case stored(seq: Int64)
    /// The same device and fix time was already stored (a resend): answered with the stored seq.
    case duplicate(seq: Int64)
    /// The same device and fix time was stored with other coordinates: the first is kept.
    case conflict(seq: Int64)
    /// Not stored; the reply is `err <code>`.
    case failed(IngestError)

    /// The seq to answer `ok` with, if any.
    package var seq: Int64? {
        switch self {
        case .stored(let seq), .duplicate(let seq), .conflict(let seq): seq
        case .failed: nil
        }
    }
}

/// A position as stored, with its place in the spool.
package struct StoredPosition: Sendable, Equatable {
    package var seq: Int64
    package var deviceID: Int64
    package var receivedMs: Int64
    package var position: Position

    package init(seq: Int64, deviceID: Int64, receivedMs: Int64, position: Position) {
        self.seq = seq
        self.deviceID = deviceID
        self.receivedMs = receivedMs
        self.position = position
    }
}

/// A destination's view of one device: how far it has acknowledged, whether it is parked.
package struct DeviceCursor: Sendable, Equatable {
    package var deviceID: Int64
    package var device: String
    package var ackedSeq: Int64
    package var lastSeq: Int64
    package var parkedUntilMs: Int64?
    /// Positions waiting: the device's stored minus what the cursor has settled (`cursors.settled`).
    package var pending: Int

    package init(
        deviceID: Int64, device: String, ackedSeq: Int64, lastSeq: Int64, parkedUntilMs: Int64?, pending: Int = 0
    ) {
        self.deviceID = deviceID
        self.device = device
        self.ackedSeq = ackedSeq
        self.lastSeq = lastSeq
        self.parkedUntilMs = parkedUntilMs
        self.pending = pending
    }
}

/// A destination's connection state, as status shows it.
package enum DestinationState: String, Sendable, CaseIterable {
    case online, backoff, probing, disabled
    /// The server refused the credentials; waiting for new ones (or retrying the login).
    case authFailed = "auth-failed"
    /// The uplink carrying it has spent its budget: only alarms and a still-alive position per
    /// device go; the backlog waits (`UplinkGate`).
    case deferred
}

/// Changes to one destination's delivery state, applied in the writer's next commit.
///
/// Forwarders send these without waiting: an acknowledgement lost in a crash
/// only means the position is sent again, which the at-least-once promise allows.
package struct DeliveryUpdate: Sendable {
    package var destination: String
    /// Per device, the highest seq the server acknowledged (cursors only move forward).
    package var acknowledged: [(deviceID: Int64, seq: Int64)] = []
    /// Positions the server refused outright: kept, counted, never retried automatically.
    package var quarantined: [(deviceID: Int64, seq: Int64, reason: String)] = []
    /// Positions found unsendable before the cursor reaches them (a plan of the backlog): their
    /// quarantine is recorded now, but the cursor passes them only with the delivery before them.
    /// Moved now, it would settle the positions in between unsent, lost to a crash or a stop.
    package var quarantinedUnreached: [(seq: Int64, reason: String)] = []
    /// Devices the server does not know: parked until the time given, or unparked (nil).
    package var parked: [(deviceID: Int64, untilMs: Int64?, reason: String?)] = []
    package var sent = 0
    /// Of `sent`, positions older than one of their device the server already had: Traccar's
    /// event handlers skip them (`DrainOrder`), so the operator sees what a drain cost.
    package var behindNewer = 0
    /// What the link carried for this destination since the last update, as a metered plan bills
    /// it (IP bytes: headers, handshakes, ACKs, retransmissions; the forwarders' `WireMeter`).
    package var wireBytes = 0
    /// The HTTP (or Teltonika frame) bytes of the same requests, kept beside the bill so the
    /// overhead shows (`payloadBytes` in status).
    package var payloadBytes = 0
    package var state: StateChange?
    /// The body encoding in use (push destinations), when it changed.
    package var encoding: String?
    /// The location filter's memory per device, as of the acknowledgements above.
    package var filterStates: [(deviceID: Int64, state: FilterState)] = []
    /// Positions sent ahead of their device's backlog (alarms, and still-alive positions over an
    /// uplink whose budget is spent): skipped when the backlog reaches them.
    package var sentAhead: [Int64] = []
    /// Replayed positions delivered: off the replay queue.
    package var replayed: [Int64] = []
    /// Settled while a backlog drains: committed within ``Spool/drainCommitInterval`` rather than
    /// the state interval, so a crash mid-drain resends about a second's worth, not 15 s of it
    /// (up to 480 KB of billed bytes on a 256 kbit/s link). The steady state keeps the interval.
    package var drain = false

    package init(destination: String) {
        self.destination = destination
    }

    package struct StateChange: Sendable {
        package var state: DestinationState
        package var lastError: String?
        package var nextAttemptMs: Int64?
        package var lastSuccessMs: Int64?

        package init(
            state: DestinationState, lastError: String? = nil, nextAttemptMs: Int64? = nil, lastSuccessMs: Int64? = nil
        ) {
            self.state = state
            self.lastError = lastError
            self.nextAttemptMs = nextAttemptMs
            self.lastSuccessMs = lastSuccessMs
        }
    }

    package var isEmpty: Bool {
        acknowledged.isEmpty && quarantined.isEmpty && quarantinedUnreached.isEmpty && parked.isEmpty && sent == 0
            && wireBytes == 0 && payloadBytes == 0 && state == nil && encoding == nil && filterStates.isEmpty
            && sentAhead.isEmpty && replayed.isEmpty
    }
}

/// A destination as the spool tracks it.
package struct DestinationRegistration: Sendable, Equatable {
    package var name: String
    /// `false` for real-time-only destinations: they hold nothing back from deletion.
    package var buffered: Bool

    package init(name: String, buffered: Bool) {
        self.name = name
        self.buffered = buffered
    }
}

import GeoRelayCore
import GeoRelaySpool

/// One position on its way to a destination, and what the server's answer to it settles.
struct Delivery: Sendable {
    enum Kind: Sendable, Equatable {
        /// The next of its device's backlog: answered, it moves the device's cursor.
        case backlog
        /// Sent ahead of its device's backlog (an alarm, or a still-alive position over an uplink
        /// whose budget is spent): the backlog skips it when it gets there.
        case ahead
        /// History queued by `georelay replay`: off the replay queue once answered; no cursor moves.
        case replay
    }

    /// The position as it goes out (with `motion` and `archive` attributes where they apply).
    var stored: StoredPosition
    /// Delivered, it acknowledges its device up to here: itself and the positions the filter
    /// skipped after it.
    var ackThrough: Int64
    /// The filter's memory once it and those skipped positions are done.
    var stateAfter: FilterState
    var kind = Kind.backlog

    var deviceID: Int64 { stored.deviceID }
    var device: String { stored.position.device }

    /// A replayed position: history, marked `archive=true` (the key Traccar's own decoders use for
    /// positions a device stored while it could not send; the push wire carries no attributes).
    static func replay(_ stored: StoredPosition) -> Delivery {
        var history = stored
        history.position.attributes.append(Attribute("archive", .bool(true)))
        return Delivery(stored: history, ackThrough: stored.seq, stateAfter: FilterState(), kind: .replay)
    }
}

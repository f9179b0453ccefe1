import GeoRelayCore
import GeoRelaySpool

/// What an engine does after an answer is settled.
enum Settled: Equatable {
    /// The device's next positions may go.
    case goesOn
    /// The device is parked (the server does not know it): the engine takes the next device.
    case deviceParked
    /// The destination cannot take anything now: nothing new starts this round.
    case destinationFailed
}

extension DeliveryLedger {
    /// Settles one answer: `indices` of `batch`'s deliveries (a request's position, a Teltonika
    /// frame's), with the server's `outcome`. Every Traccar engine settles through here, so an
    /// outcome means the same whatever carried it: one request at a time, a pipelined window or
    /// a frame.
    mutating func settle(
        _ outcome: DeliveryOutcome, _ indices: Range<Int>, of batch: DeviceBatch, result: inout DeviceResult,
        parkSeconds: Double, logger: Logger, into update: inout DeliveryUpdate
    ) -> Settled {
        let deliveries = batch.deliveries
        switch outcome {
        case .delivered:
            let firstOfRound = result.delivered == 0
            for index in indices { delivered(deliveries[index], into: &update) }
            result.delivered += indices.count
            // A parked device whose position was taken is known to the server again.
            if firstOfRound, batch.cursor.parkedUntilMs != nil, let first = indices.first {
                unpark(deliveries[first], logger: logger, into: &update)
            }
            return .goesOn
        case .rejected(let reason):
            for index in indices { refused(deliveries[index], reason: reason, logger: logger, into: &update) }
            return .goesOn
        case .unknownDevice(let reason):
            if let first = indices.first {
                park(deliveries[first], seconds: parkSeconds, reason: reason, logger: logger, into: &update)
            }
            return .deviceParked
        case .unavailable:
            result.unavailable = outcome
            return .destinationFailed
        }
    }
}

extension ServerCheck {
    /// The canary's verdict on a payload the server closed the connection on twice without an
    /// answer: only an answer from the server to an empty request proves the payload, not the
    /// link, was at fault.
    static func canaryOutcome(_ response: Result<HTTPResponse, CurlError>) -> DeliveryOutcome {
        provesServer(response)
            ? .rejected("server closed the connection without a response, twice, and answers an empty request")
            : .unavailable(
                "no answer to the position nor to an empty request: the link, not the payload", retryAfter: nil,
                transport: true)
    }
}

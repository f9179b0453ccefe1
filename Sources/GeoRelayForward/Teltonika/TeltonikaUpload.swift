import GeoRelayCore

/// One position straight to the Teltonika port, on a connection of its own: `georelay send`.
package enum TeltonikaUpload {
    /// Identifies as the position's device, sends it in a frame of its own and reads the answers,
    /// blocking for at most the connect timeout and then the request timeout.
    package static func send(
        _ position: Position, settings: Configuration.DestinationSettings, clock: any RelayClock = SystemClock()
    ) -> DeliveryOutcome {
        let endpoint: TeltonikaSession.Endpoint
        do throws(CurlError) {
            endpoint = try TeltonikaSession.Endpoint(settings: settings, clock: clock)
        } catch {
            return .unavailable(error.message, retryAfter: nil, transport: false)
        }
        let session: TeltonikaSession
        do throws(TeltonikaCodecError) {
            session = try TeltonikaSession(uniqueID: position.device, endpoint: endpoint)
        } catch {
            return .rejected(error.message)
        }
        do throws(CurlError) {
            try session.connect()
        } catch {
            return .unavailable(error.message, retryAfter: nil, transport: true)
        }
        defer { session.close() }
        let deadline = clock.now() + settings.requestTimeout
        var event = session.send(frame: TeltonikaCodec.dataFrame(records: [TeltonikaCodec.record(from: position)]))
        while true {
            switch event ?? session.nextEvent(before: deadline) {
            case .identified(.known)?:
                event = nil
            case .identified(.unknown)?:
                return .unknownDevice(
                    "Traccar's Teltonika port does not know the device (identification answered 0x00)")
            case .acknowledged(1)?:
                return .delivered
            case .acknowledged(let count)?:
                return .unavailable(
                    "Traccar answered \(count) to a frame of 1 record", retryAfter: nil, transport: true)
            case .broken(.closedUnanswered)?:
                return .rejected("Traccar closed the connection without answering the frame")
            case .broken(.notTraccar(let message))?, .broken(.failed(let message))?:
                return .unavailable(message, retryAfter: nil, transport: true)
            case nil:
                return .unavailable(
                    "no answer within \(Int(settings.requestTimeoutSeconds)) s: timed out", retryAfter: nil,
                    transport: true)
            }
        }
    }
}

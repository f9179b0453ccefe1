import GeoRelayCore
import GeoRelayForward

/// `georelay send`: one position straight to the destinations, bypassing the spool.
extension Commands {
    static func send(_ invocation: Invocation) async throws -> ExitCode {
        let arguments = invocation.arguments
        // Whole seconds: what a Traccar client sends for `requestPosition`.
        let position = Position(
            device: arguments.requiredText("--device"), timeMs: invocation.clock.nowMs() / 1000 * 1000,
            lat: arguments.requiredNumber("--lat"), lon: arguments.requiredNumber("--lon"),
            alarm: arguments.text("--alarm"))
        var ok = true
        for result in try await send(
            position, destination: arguments.text("--destination"), configuration: invocation.configuration,
            clock: invocation.clock)
        {
            if case .delivered = result.outcome {
                invocation.console.line("\(result.destination): delivered")
            } else {
                ok = false
                invocation.console.line("\(result.destination): not delivered, \(result.outcome)")
            }
        }
        return ok ? .success : .failure
    }

    /// What `georelay send` did at one destination.
    package struct SendResult: Sendable {
        package var destination: String
        package var outcome: DeliveryOutcome
    }

    /// Uploads one position right away, bypassing the spool (the Traccar
    /// client's `requestPosition`), to the named destination or to all.
    ///
    /// Each upload blocks in libcurl or on a socket, so none runs on the caller's
    /// thread: OsmAnd requests go through an `HTTPWorker` (its own queue), the
    /// Teltonika exchange on a thread of its own.
    package static func send(
        _ position: Position, destination: String?, configuration: Configuration, clock: any RelayClock
    ) async throws -> [SendResult] {
        let targets = configuration.destinations.filter { destination == nil || $0.name == destination }
        if targets.isEmpty {
            guard let destination else { throw RelayError("the configuration has no destinations") }
            throw UsageError(
                command: "send", "--destination '\(destination)' is not a destination of the configuration")
        }
        var results: [SendResult] = []
        for settings in targets {
            let outcome: DeliveryOutcome
            if settings.kind == .push {
                outcome = await sendPush(position, settings: settings, configuration: configuration, clock: clock)
            } else if settings.traccarProtocol == .teltonika {
                outcome = await onDedicatedThread(named: "georelay.send.teltonika") {
                    TeltonikaUpload.send(position, settings: settings)
                }
            } else {
                let traccar = TraccarProtocol(settings: settings)
                do throws(CurlError) {
                    let worker = try HTTPWorker(label: "georelay.cli.send", tls: settings.tls)
                    outcome = traccar.outcome(of: await worker.perform(traccar.request(for: position)))
                } catch {
                    outcome = traccar.outcome(of: .failure(error))
                }
            }
            results.append(SendResult(destination: settings.name, outcome: outcome))
        }
        return results
    }
}

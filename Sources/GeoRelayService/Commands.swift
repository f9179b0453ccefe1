import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool

/// The one-shot commands behind `georelay logs` and `georelay send`.
package enum Commands {
    /// The diagnostic log, oldest first, one line per entry with a millisecond timestamp.
    package static func logs(configuration: Configuration, limit: Int = 10_000) throws -> String {
        let reader = try SpoolReader.open(path: configuration.spool.path)
        return try reader.logEntries(limit: limit).map { entry in
            "\(Timestamp.iso8601(milliseconds: entry.timeMs)) \(entry.level.name) \(entry.message)\n"
        }.joined()
    }

    /// Empties the diagnostic log (works while the daemon runs).
    package static func clearLogs(configuration: Configuration) throws {
        try Spool.clearLog(path: configuration.spool.path)
    }

    /// What `georelay send` did at one destination.
    package struct SendResult: Sendable {
        package var destination: String
        package var outcome: DeliveryOutcome
    }

    /// Uploads one position right away, bypassing the spool (the Traccar
    /// client's `requestPosition`), to the named destination or to all.
    package static func send(_ position: Position, destination: String?, configuration: Configuration) async throws -> [SendResult] {
        let targets = configuration.destinations.filter { destination == nil || $0.name == destination }
        if targets.isEmpty {
            throw RelayError("no destination named \(destination ?? "") in the configuration")
        }
        var results: [SendResult] = []
        for settings in targets {
            let easy = try CurlEasy(tls: settings.tls)
            if settings.kind == .push {
                results.append(SendResult(destination: settings.name, outcome: await sendPush(position, settings: settings, configuration: configuration)))
                continue
            }
            if settings.traccarProtocol == .teltonika {
                results.append(SendResult(destination: settings.name, outcome: TeltonikaUpload.send(position, settings: settings)))
                continue
            }
            let traccar = TraccarProtocol(settings: settings)
            let result: Result<HTTPResponse, CurlError>
            do throws(CurlError) {
                result = .success(try easy.perform(traccar.request(for: position)))
            } catch {
                result = .failure(error)
            }
            results.append(SendResult(destination: settings.name, outcome: traccar.outcome(of: result)))
        }
        return results
    }
}

import GeoRelayCore
import GeoRelaySpool
import Glibc

/// `georelay replay` and `georelay export`: the spool's history, sent again or written out.
extension Commands {
    static func replay(_ invocation: Invocation) async throws -> ExitCode {
        let arguments = invocation.arguments
        let name = arguments.requiredText("--destination")
        guard let destination = invocation.configuration.destinations.first(where: { $0.name == name }) else {
            let names = invocation.configuration.destinations.map(\.name).joined(separator: ", ")
            throw UsageError(
                command: "replay",
                "--destination '\(name)' is not a destination of the configuration (\(names.isEmpty ? "it has none" : names))"
            )
        }
        let filter = arguments.flag("--all") ? nil : LocationFilter(settings: destination.filter)
        let selection = ReplaySelection(
            sinceMs: arguments.requiredTime("--since"), untilMs: arguments.time("--until") ?? .max,
            device: arguments.text("--device"), filter: filter)
        let report = try await queueReplay(
            configuration: invocation.configuration, destination: name, selection: selection)
        invocation.console.line(
            "queued \(report.queued) of \(report.considered) positions for \(name)\(filter == nil ? "" : " (through its filter)")"
        )
        for (device, oldest) in report.evicted {
            invocation.console.line(
                "\(device): nothing before \(Timestamp.iso8601(milliseconds: oldest)) is left in the spool (evicted)")
        }
        return .success
    }

    static func export(_ invocation: Invocation) throws -> ExitCode {
        let arguments = invocation.arguments
        guard let format = Exporter.Format(rawValue: arguments.requiredText("--format")) else {
            preconditionFailure("the parser admits only format names")
        }
        let reader = try SpoolReader.open(path: invocation.configuration.spool.path)
        var handle = invocation.console.standardOutput
        let path = arguments.text("-o")
        if let path {
            do {
                handle = try FileOutput(creatingAt: path)
            } catch {
                throw RelayError("cannot write \(path): \(error)")
            }
        }
        defer { if path != nil { handle.close() } }
        let count = try Exporter(
            format: format, device: arguments.text("--device"), sinceMs: arguments.time("--since"),
            untilMs: arguments.time("--until")
        )
        .run(reader: reader, to: Exporter.Output(handle: handle))
        if let path {
            do {
                try handle.finish()
            } catch {
                throw RelayError("cannot write \(path): \(error)")
            }
            invocation.console.line("exported \(count) positions")
        }
        return .success
    }
}

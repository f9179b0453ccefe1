import GeoRelayCollect
import GeoRelayCore

/// `georelay collect`: one GPS unit's lines into the relay's socket, on the thread the command runs on.
extension Commands {
    static func collect(_ invocation: Invocation) throws -> ExitCode {
        let arguments = invocation.arguments
        var device = arguments.text("--device")
        let source: any LineSource
        // The parser made sure exactly one source was given.
        if let path = arguments.text("--serial") {
            let baud = arguments.integer("--baud") ?? 4800
            guard SerialSource.speed(baud) != nil else {
                throw UsageError(
                    command: "collect", "--baud \(baud) is not a standard rate (4800, 9600, 38400, 115200, ...)")
            }
            source = SerialSource(path: path, baud: baud)
        } else if let text = arguments.text("--udp") {
            guard let (host, port) = hostPort(text, defaultHost: "0.0.0.0") else {
                throw UsageError(command: "collect", "--udp '\(text)' is not [HOST:]PORT")
            }
            source = UDPSource(host: host, port: port)
        } else if let text = arguments.text("--tcp") {
            guard text.contains(":"), let (host, port) = hostPort(text, defaultHost: "127.0.0.1") else {
                throw UsageError(command: "collect", "--tcp '\(text)' is not HOST:PORT")
            }
            source = TCPSource(host: host, port: port)
        } else if let text = arguments.text("--gpsd") {
            guard let (host, port) = hostPort(text, defaultHost: "127.0.0.1", defaultPort: 2947) else {
                throw UsageError(command: "collect", "--gpsd '\(text)' is not [HOST[:PORT]]")
            }
            var mapping: [String: String] = [:]
            if device == "{path}" {
                device = nil
            } else if let text = device, text.contains("=") {
                for pair in text.split(separator: ",") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    guard parts.count == 2 else {
                        throw UsageError(command: "collect", "--device mapping '\(pair)' is not PATH=ID")
                    }
                    mapping[String(parts[0])] = String(parts[1])
                }
                device = nil
            }
            source = GpsdSource(host: host, port: port, mapping: mapping)
        } else {
            source = FileSource(path: arguments.text("--file") ?? "-", realtime: arguments.flag("--realtime"))
        }
        if device == nil, !arguments.has("--gpsd") {
            throw UsageError(command: "collect", "--device ID is required (but with --gpsd)")
        }
        let level =
            arguments.text("--log-level").flatMap { name in LogLevel.allCases.first { $0.name == name } } ?? .info
        let logger = Logger(label: "collect[\(device ?? "gpsd")]", sinks: [StandardErrorLogSink()], minimumLevel: level)
        let link = RelayLink.Settings(
            socketPath: arguments.text("--socket") ?? invocation.configuration.ingest.socket,
            hello: Collector.hello(device: device))
        try Collector(source: source, link: link, logger: logger).run()
        return .success
    }

    /// `host:port` or `port` (with a default host), or a host alone when there is a default port.
    static func hostPort(_ text: String, defaultHost: String, defaultPort: UInt16? = nil) -> (String, UInt16)? {
        if let colon = text.lastIndex(of: ":") {
            guard let port = UInt16(text[text.index(after: colon)...]) else { return nil }
            return (String(text[..<colon]), port)
        }
        if let port = UInt16(text) { return (defaultHost, port) }
        if let defaultPort, !text.isEmpty { return (text, defaultPort) }
        return nil
    }
}

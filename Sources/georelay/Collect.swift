import Foundation
import GeoRelayCollect
import GeoRelayCore

/// `host:port` or `port` (with a default host).
func hostPort(_ text: String, defaultHost: String, defaultPort: UInt16? = nil) -> (String, UInt16)? {
    if let colon = text.lastIndex(of: ":") {
        guard let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        return (String(text[..<colon]), port)
    }
    if let port = UInt16(text) { return (defaultHost, port) }
    if let defaultPort, !text.isEmpty { return (text, defaultPort) }
    return nil
}

func collect(_ arguments: Arguments, configuration: Configuration) -> Int32 {
    let options = arguments.options
    let sources = ["--serial", "--udp", "--tcp", "--gpsd", "--file"].filter { options[$0] != nil } + (arguments.positionals == ["-"] ? ["-"] : [])
    guard sources.count == 1 else {
        printError("collect: give exactly one source (--serial, --udp, --tcp, --gpsd, --file or -)")
        return 64
    }
    var device = options["--device"]
    var mapping: [String: String] = [:]
    let source: any LineSource
    switch sources[0] {
    case "--serial":
        let baud = Int(options["--baud"] ?? "4800") ?? -1
        guard SerialSource.speed(baud) != nil else {
            printError("collect: --baud \(options["--baud"] ?? "") is not a standard rate (4800, 9600, 38400, 115200, ...)")
            return 64
        }
        source = SerialSource(path: options["--serial"]!, baud: baud)
    case "--udp":
        guard let (host, port) = hostPort(options["--udp"]!, defaultHost: "0.0.0.0") else {
            printError("collect: --udp takes [HOST:]PORT")
            return 64
        }
        source = UDPSource(host: host, port: port)
    case "--tcp":
        guard let (host, port) = hostPort(options["--tcp"]!, defaultHost: "127.0.0.1"), options["--tcp"]!.contains(":") else {
            printError("collect: --tcp takes HOST:PORT")
            return 64
        }
        source = TCPSource(host: host, port: port)
    case "--gpsd":
        guard let (host, port) = hostPort(options["--gpsd"]!, defaultHost: "127.0.0.1", defaultPort: 2947) else {
            printError("collect: --gpsd takes [HOST[:PORT]]")
            return 64
        }
        if device == "{path}" {
            device = nil
        } else if let text = device, text.contains("=") {
            for pair in text.split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else {
                    printError("collect: --device mapping \"\(pair)\" is not PATH=ID")
                    return 64
                }
                mapping[String(parts[0])] = String(parts[1])
            }
            device = nil
        }
        source = GpsdSource(host: host, port: port, mapping: mapping)
    default:
        source = FileSource(path: options["--file"] ?? "-", realtime: arguments.flags.contains("--realtime"))
    }
    if device == nil, sources[0] != "--gpsd" {
        printError("collect: --device is required")
        return 64
    }
    var level = LogLevel.info
    if let text = options["--log-level"], let parsed = LogLevel.allCases.first(where: { $0.name == text }) { level = parsed }
    let logger = Logger(label: "collect[\(device ?? "gpsd")]", sinks: [StandardErrorLogSink()], minimumLevel: level)
    let link = RelayLink.Settings(socketPath: options["--socket"] ?? configuration.ingest.socket, hello: Collector.hello(device: device))
    do {
        try Collector(source: source, link: link, logger: logger).run()
        return 0
    } catch {
        printError("collect: \(error)")
        return 1
    }
}


import GeoRelayCore
import Glibc

/// `georelay collect`: one GPS unit's lines into the relay's socket, acks on.
package struct Collector {
    package var source: any LineSource
    package var link: RelayLink.Settings
    package var logger: Logger

    package init(source: any LineSource, link: RelayLink.Settings, logger: Logger) {
        self.source = source
        self.link = link
        self.logger = logger
    }

    /// The hello line: a device, or none (gpsd reports carry their own).
    package static func hello(device: String?) -> String {
        var members: [(key: String, value: JSONValue)] = []
        if let device { members.append(("device", .string(device))) }
        members.append(("ack", .bool(true)))
        return JSONValue.object(JSONObject([("hello", .object(JSONObject(members)))])).jsonText
    }

    /// Whether the relay would read `line` as a message to itself rather than as a position or a
    /// sentence: a JSON object with a `hello` member, as `LineDecoder` reads it (the same parser, so
    /// an escaped spelling such as `\u0068ello` does not slip past; a hello the relay would refuse
    /// is no position either).
    package static func isProtocolMessage(_ line: String) -> Bool {
        guard line.utf8.first(where: { $0 != 0x20 && $0 != 0x09 }) == UInt8(ascii: "{"),
            case .object(let object)? = try? JSONParser.parse(line)
        else { return false }
        return object["hello"] != nil
    }

    /// Runs until the source ends (a file) or for ever (a receiver). Throws when the
    /// source cannot be opened at start.
    package func run() throws {
        try source.open()
        logger.info("collecting from \(source.name)")
        let relay = try RelayLink(settings: link, logger: logger)
        relay.start()
        var delay = 0.5
        var refusedHellos = 0
        while true {
            while let line = source.nextLine() {
                if line.isEmpty { continue }
                if Self.isProtocolMessage(line) {
                    // A source speaks for a receiver, not for the collector: a hello from it would
                    // rename the device or turn acknowledgements off for every line after it.
                    refusedHellos += 1
                    if refusedHellos == 1 || refusedHellos.isMultiple(of: 1000) {
                        logger.warning(
                            "\(source.name) sent a hello line; not passed to the relay (\(refusedHellos) so far)")
                    }
                    continue
                }
                relay.send(line, live: source.isLive)
                delay = 0.5
            }
            source.close()
            guard source.reopens else { break }
            logger.warning("\(source.name) went away; opening it again")
            while true {
                sleepBlocking(seconds: delay)
                delay = min(delay * 2, 30)
                do {
                    try source.open()
                    logger.notice("\(source.name) is back")
                    break
                } catch {
                    logger.debug("\(error)")
                }
            }
        }
        relay.finish()
        let stats = relay.stats
        logger.info(
            "done: \(stats.answered) lines answered, \(stats.errors) refused, \(stats.dropped) dropped, \(refusedHellos) hello lines not passed on"
        )
        relay.close()
    }
}

import GeoRelayCore
import GeoRelaySpool

/// The units' collectors as the relay's ingest meets them: one `IngestSession` per device (the
/// state machine the daemon's ingest loop drives, with the configuration's line rules and the
/// relay's clock), a `hello` asking for acknowledgements, then one JSON line per fix. What a
/// session asks to store goes to the spool in one append per step, and the session answers
/// each line from the spool's result: `ok <seq>` only once it is committed. A relay restart
/// starts new sessions, as collectors reconnect.
struct SimulatedCollectors {
    private var sessions: [String: IngestSession] = [:]
    private let rules: IngestSession.Rules
    /// Lines answered `ok`, and refused (`err`, with the first few replies).
    private(set) var acknowledged = 0
    private(set) var refused = 0
    private(set) var refusals: [String] = []

    init(clock: any RelayClock) {
        let settings = Configuration().ingest
        rules = IngestSession.Rules(
            decoder: LineDecoder(maxFutureSeconds: settings.maxFutureSeconds), clock: IngestClock(clock),
            maxLineBytes: settings.maxLineBytes)
    }

    /// The relay restarted: each collector connects again and says hello.
    mutating func reconnect(clock: any RelayClock) {
        self = SimulatedCollectors(clock: clock, keeping: self)
    }

    private init(clock: any RelayClock, keeping counts: SimulatedCollectors) {
        self.init(clock: clock)
        (acknowledged, refused, refusals) = (counts.acknowledged, counts.refused, counts.refusals)
    }

    /// Sends `fixes` as their units' lines; returns those answered `ok` (stored and committed).
    mutating func send(_ fixes: [Position], to spool: Spool) async -> [Position] {
        var stores: [(device: String, ticket: IngestSession.Ticket, positions: [Position])] = []
        for fix in fixes {
            var session = sessions[fix.device] ?? hello(fix.device)
            let line = Array(Self.line(fix).utf8)
            for action in line.withUnsafeBufferPointer({ session.receive(line: $0) }) {
                switch action {
                case .store(let positions, let ticket): stores.append((fix.device, ticket, positions))
                case .reject(let error, _): note("err \(error.code) \(error.message)")
                default: break
                }
            }
            sessions[fix.device] = session
        }
        // One commit for the step's lines, as the ingest loop groups what arrives together.
        var results = await spool.append(stores.flatMap(\.positions))[...]
        var answered: [Position] = []
        for store in stores {
            let mine = results.prefix(store.positions.count)
            results = results.dropFirst(store.positions.count)
            // The first position's result answers the lines the store stands for.
            let first = mine.first ?? .failed(.internal("not stored"))
            sessions[store.device]?.stored(store.ticket, first.seq.map { .success($0) } ?? .failure(Self.error(first)))
            for (position, result) in zip(store.positions, mine) where result.seq != nil {
                answered.append(position)
            }
        }
        for device in sessions.keys.sorted() {
            var output: [UInt8] = []
            sessions[device]?.collectReplies(into: &output)
            for reply in String(decoding: output, as: UTF8.self).split(separator: "\n") {
                // `skip hello`: the hello is taken, not stored; anything else not `ok` is a refusal.
                if reply.hasPrefix("ok ") {
                    acknowledged += 1
                } else if !reply.hasPrefix("skip ") {
                    note(String(reply))
                }
            }
        }
        return answered
    }

    private mutating func hello(_ device: String) -> IngestSession {
        var session = IngestSession(rules: rules)
        let line = Array(#"{"hello":{"device":"\#(device)","ack":true}}"#.utf8)
        _ = line.withUnsafeBufferPointer { session.receive(line: $0) }
        return session
    }

    private mutating func note(_ reply: String) {
        refused += 1
        if refusals.count < 5 { refusals.append(reply) }
    }

    private static func error(_ result: AppendResult) -> IngestError {
        if case .failed(let error) = result { return error }
        return .internal("not stored")
    }

    /// The fix as a collector writes it: the JSON line of the relay's protocol (docs/socket-protocol.md).
    static func line(_ fix: Position) -> String {
        var line = #"{"time":\#(fix.timeMs / 1000),"lat":\#(fix.lat),"lon":\#(fix.lon)"#
        if let speed = fix.speed { line += #","speed":\#(speed)"# }
        if let course = fix.course { line += #","course":\#(course)"# }
        if let accuracy = fix.accuracy { line += #","accuracy":\#(accuracy)"# }
        if let alarm = fix.alarm { line += #","alarm":"\#(alarm)""# }
        return line + "}"
    }
}

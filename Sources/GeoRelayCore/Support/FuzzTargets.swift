/// What the fuzzers run (`Tests/Fuzz`), kept in the library so the corpus and every
/// crash found replay as ordinary unit tests (`FuzzRegressionTests`).
///
/// Each target must never crash, whatever the bytes; beyond that it checks the
/// properties a collector relies on: a position the ingest session would store is in range
/// and survives the OsmAnd encoding the Traccar destination sends.
package enum FuzzTargets {
    /// A fixed relay clock, so a run is reproducible: 2026-07-25T05:30:00Z.
    static let nowMs: Int64 = 1_784_957_400_000

    /// The socket protocol: the input split into lines and fed to one `IngestSession`, as a
    /// connection's are, on a fixed clock; every position it would store must be sound, and
    /// once each is stored every reply is known (nothing waits for ever).
    package static func lines(_ bytes: UnsafeRawBufferPointer) {
        let rules = IngestSession.Rules(decoder: LineDecoder(), clock: IngestClock(wallMs: { nowMs }, monotonicMs: { 0 }),
                                        maxLineBytes: 8192)
        var session = IngestSession(rules: rules)
        // A connection that said hello with acks on, so NMEA sentences have a device and every
        // line has a reply; the input can say hello again.
        _ = #"{"hello":{"device":"nmea","ack":true}}"#.utf8CString.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: UInt8.self) { session.receive(line: UnsafeBufferPointer(rebasing: $0.dropLast())) }
        }
        var seq: Int64 = 0
        func perform(_ actions: [IngestSession.Action]) {
            for case .store(let positions, let ticket) in actions {
                for position in positions { check(position) }
                seq += 1
                session.stored(ticket, .success(seq))
            }
        }
        for line in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
            Array(line).withUnsafeBufferPointer { perform(session.receive(line: $0)) }
        }
        perform(session.finish())
        precondition(session.unresolved == 0, "\(session.unresolved) replies still pending after every store and the end of input")
    }

    /// Config loading: any text either loads or fails with a ConfigError, never a crash.
    package static func config(_ bytes: UnsafeRawBufferPointer) {
        _ = try? Configuration.parse(String(decoding: bytes, as: UTF8.self))
    }

    private static func check(_ position: Position) {
        precondition((-90...90).contains(position.lat) && (-180...180).contains(position.lon), "accepted a position out of range: \(position.lat), \(position.lon)")
        precondition(!position.device.isEmpty, "accepted a position without a device")
        let query = OsmAndQuery.encode(position)
        do {
            let back = try OsmAndQuery.decode(query, defaultDevice: nil)
            precondition(back.device == position.device, "device \(position.device) came back as \(back.device) through \(query)")
        } catch {
            preconditionFailure("the OsmAnd form of an accepted position does not decode: \(query): \(error)")
        }
    }
}

/// What the fuzzers run (`Tests/Fuzz`), kept in the library so the corpus and every
/// crash found replay as ordinary unit tests (`FuzzRegressionTests`).
///
/// Each target must never crash, whatever the bytes; beyond that it checks the
/// properties a collector relies on: a position the decoder accepts is in range and
/// survives the OsmAnd encoding the Traccar destination sends.
package enum FuzzTargets {
    /// A fixed relay clock, so a run is reproducible: 2026-07-25T05:30:00Z.
    static let nowMs: Int64 = 1_784_957_400_000

    /// The socket protocol: the input split into lines, each decoded as ingest does,
    /// NMEA sentences fed through one fix-cycle assembler as a connection would.
    package static func lines(_ bytes: UnsafeRawBufferPointer) {
        let decoder = LineDecoder()
        var assembler = NMEAAssembler()
        var device: String? = nil
        for line in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
            let copy = Array(line)
            let decoded = copy.withUnsafeBufferPointer { buffer -> IngestLine? in
                try? decoder.decode(buffer, defaultDevice: device, nowMs: nowMs)
            }
            switch decoded {
            case .position(let position)?:
                check(position)
            case .hello(let hello, _)?:
                device = hello ?? device
            case .nmea(let sentence)?:
                for action in assembler.feed(sentence, device: device ?? "nmea") {
                    if case .flush(let position) = action { check(position) }
                    if case .complete(let position) = action { check(position) }
                }
            case .skip?, nil:
                break
            }
        }
        if let position = assembler.flush(device: device ?? "nmea") { check(position) }
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

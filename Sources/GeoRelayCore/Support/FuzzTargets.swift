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
        let rules = IngestSession.Rules(
            decoder: LineDecoder(), clock: IngestClock(wallMs: { nowMs }, monotonicMs: { 0 }),
            maxLineBytes: 8192)
        var session = IngestSession(rules: rules)
        // A connection that said hello with acks on, so NMEA sentences have a device and every
        // line has a reply; the input can say hello again.
        _ = #"{"hello":{"device":"nmea","ack":true}}"#.utf8CString.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: UInt8.self) {
                session.receive(line: UnsafeBufferPointer(rebasing: $0.dropLast()))
            }
        }
        var seq: Int64 = 0
        func perform(_ actions: [IngestSession.Action]) {
            for case .store(let positions, let ticket) in actions {
                for position in positions { check(position) }
                seq += 1
                session.stored(ticket, .success(seq))
            }
        }
        let lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false)
        for line in lines {
            Array(line).withUnsafeBufferPointer { perform(session.receive(line: $0)) }
        }
        perform(session.finish())
        precondition(
            session.unresolved == 0,
            "\(session.unresolved) replies still pending after every store and the end of input")
        // One reply per line at most (a hello can turn them off), each one of the three kinds,
        // and no `ok` for a seq never given: nothing a line holds can forge an acknowledgement.
        var output: [UInt8] = []
        session.collectReplies(into: &output)
        let replies = output.split(separator: 0x0A, omittingEmptySubsequences: false).dropLast()
        precondition(output.isEmpty || output.last == 0x0A, "the replies do not end with a newline")
        precondition(replies.count <= lines.count + 1, "\(replies.count) replies to \(lines.count) lines")
        for reply in replies {
            let text = String(decoding: reply, as: UTF8.self)
            precondition(
                reply.allSatisfy { $0 >= 0x20 && $0 != 0x7F },
                "a reply with a control character: \(text.debugDescription)")
            if text.hasPrefix("ok ") {
                precondition(
                    Int64(text.dropFirst(3)).map { (1...seq).contains($0) } ?? false,
                    "a forged acknowledgement: \(text)")
            } else {
                precondition(
                    text.hasPrefix("err ") || text.hasPrefix("skip "), "a reply of no kind: \(text.debugDescription)")
            }
        }
    }

    /// The encoders and formatters a stored position goes through, fed a position made of
    /// arbitrary bits (any Double, NaN and infinities included; any Int64 time): none may trap,
    /// whatever an older version or a bug wrote into the spool. ``PositionBounds`` must name a
    /// problem for every position ingest would refuse.
    package static func encoders(_ bytes: UnsafeRawBufferPointer) {
        var reader = BitReader(bytes)
        var position = Position(
            device: "fuzz", timeMs: Int64(bitPattern: reader.next()),
            lat: reader.double(), lon: reader.double())
        position.speed = reader.optionalDouble()
        position.course = reader.optionalDouble()
        position.altitude = reader.optionalDouble()
        position.accuracy = reader.optionalDouble()
        position.battery = reader.optionalDouble()
        position.attributes = [
            Attribute("hdop", .number(reader.double())), Attribute("odometer", .number(reader.double())),
        ]
        _ = OsmAndQuery.encode(position)
        _ = Timestamp.iso8601(milliseconds: position.timeMs)
        var out: [UInt8] = []
        JSONBytes.appendISO8601(milliseconds: position.timeMs, to: &out)
        // The element type is spelled out: Swift 6.0 infers [Any] from the mixed `??` operands.
        let values: [Double] = [position.lat, position.lon, position.speed ?? 0, position.course ?? 0]
        for value in values {
            JSONBytes.appendFixed(value, decimals: 7, to: &out)
            JSONBytes.appendNumber(value, to: &out)
            _ = JSONValue.format(number: value)
        }
        _ = [Attribute](jsonText: position.attributes.jsonText)
        if let course = position.course, let folded = PositionBounds.folded(course: course) {
            precondition((0..<360).contains(folded), "course \(course) folded to \(folded)")
        }
        if PositionBounds.problem(in: position) == nil {
            precondition(
                position.lat.isFinite && position.lon.isFinite && position.timeMs >= 0, "bounds passed \(position)")
        }
    }

    /// Reads the fuzzer's bytes as 64-bit words, zeros once they run out.
    private struct BitReader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0
        init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }
        mutating func next() -> UInt64 {
            var word: UInt64 = 0
            for shift in stride(from: 0, to: 64, by: 8) where offset < bytes.count {
                word |= UInt64(bytes[offset]) << UInt64(shift)
                offset += 1
            }
            return word
        }
        mutating func double() -> Double { Double(bitPattern: next()) }
        mutating func optionalDouble() -> Double? { next() & 1 == 0 ? nil : double() }
    }

    /// Config loading: any text either loads or fails with a ConfigError, never a crash.
    package static func config(_ bytes: UnsafeRawBufferPointer) {
        _ = try? Configuration.parse(String(decoding: bytes, as: UTF8.self))
    }

    private static func check(_ position: Position) {
        precondition(PositionBounds.problem(in: position) == nil, "accepted a position out of bounds: \(position)")
        precondition(
            position.course.map { (0..<360).contains($0) } ?? true, "accepted a course not folded: \(position)")
        precondition(!position.device.isEmpty, "accepted a position without a device")
        let query = OsmAndQuery.encode(position)
        do {
            let back = try OsmAndQuery.decode(query, defaultDevice: nil)
            precondition(
                back.device == position.device, "device \(position.device) came back as \(back.device) through \(query)"
            )
        } catch {
            preconditionFailure("the OsmAnd form of an accepted position does not decode: \(query): \(error)")
        }
    }
}

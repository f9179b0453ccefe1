/// Traccar's Teltonika port (TCP, 5027 by default): codec 8 Extended frames of
/// up to 255 positions each, answered with the number of records taken.
///
/// Why a second Traccar protocol: the OsmAnd port takes one position per HTTP
/// request, so a backlog of thousands costs thousands of round trips. One
/// Teltonika frame carries up to 255 positions at 30–45 bytes each and costs
/// one round trip.
///
/// The conversation on one TCP connection, as `TeltonikaFrameDecoder` and
/// `TeltonikaProtocolDecoder` (traccar/traccar, `src/main/java/org/traccar/protocol/`)
/// read it:
///
/// 1. The client sends ``identification(uniqueID:)``; Traccar answers one byte,
///    read with ``identificationAnswer(_:)``: `0x01` known device, `0x00` unknown.
/// 2. The client sends ``dataFrame(records:)``; Traccar answers the frame's record
///    count in 4 bytes, read with ``parseAcknowledgement(_:)``. Repeat.
///
/// Everything here is pure: no sockets, no clocks. The transport owns the connection.
///
/// - Important: `TeltonikaFrameDecoder` decides nothing until 12 bytes are buffered
///   (`MESSAGE_MINIMUM_LENGTH = 12`). An identification is 2 + the id's length bytes,
///   so an id shorter than 10 characters sits in Traccar's buffer unanswered until
///   more bytes arrive. Check ``identificationNeedsCompanion(_:)``: when it is true,
///   send the identification and the first data frame in one write (concatenate
///   them), then read the 1-byte answer and the 4-byte answer in turn. If the first
///   byte is `0x00`, Traccar drops the frame without answering it (its `parseData`
///   returns before the reply when there is no device session): close the connection.
///
/// - Important: Traccar's default (`server.delayAcknowledgement` off) writes the count
///   from inside the decoder, before the positions reach its database. The answer
///   means "decoded", not "stored": a server that dies just after answering can lose
///   the frame. That is the same promise the OsmAnd port's `200` gives.
///
/// - Important: One device per connection. Traccar attributes a data frame to *any*
///   device identified on the connection (`ConnectionManager.getDeviceSession` with no
///   ids takes `endpointSessions.values().stream().findAny()`), so identifying two
///   devices on one connection mixes their positions.
///
/// What Traccar does **not** check, so the relay cannot rely on it to reject a bad frame:
/// the CRC, the second record count, the total IO count, and the codec id (an unknown
/// codec id is read as codec 8). A frame that reads past its own end makes the decoder
/// throw, and Traccar closes the connection without answering.
package enum TeltonikaCodec {
    /// Codec 8 Extended: 2-byte IO ids and counts, and a variable-length IO section.
    package static let codec8Extended: UInt8 = 0x8E

    /// The record count is one byte (`parseData`: `int count = buf.readUnsignedByte()`).
    package static let maxRecordsPerFrame = 255

    /// The largest data frame the relay sends, in bytes, everything included.
    ///
    /// `TeltonikaFrameDecoder` is built with `BaseProtocol.MAX_FRAME_LENGTH_LARGE`
    /// (32 × 1024), and `BaseFrameDecoder` throws `TooLongFrameException` (Traccar then
    /// closes the connection) when more than that many bytes are buffered without a
    /// complete frame. A frame of 32 768 bytes never has more than 32 767 bytes buffered
    /// while incomplete, so it always passes, however TCP splits it.
    package static let maxFrameBytes = 32 * 1024

    /// The bytes `TeltonikaFrameDecoder` waits for before it decides what a frame is.
    package static let frameDecoderMinimumBytes = 12

    /// Bytes a data frame adds around its records: 4 zero bytes, the 4-byte data length,
    /// the codec id, the record count twice, and the 4-byte CRC.
    package static let frameOverheadBytes = 15

    /// Bytes of a record with no IO elements: 24 of GPS element, then the 2-byte event
    /// id, the 2-byte total count, and a 2-byte count for each of the five IO sections.
    package static let minimumRecordBytes = 24 + 2 + 2 + 5 * 2

    // MARK: Identification

    /// The identification frame: the id's length in 2 bytes big-endian, then the id in ASCII.
    ///
    /// Traccar reads the id as US-ASCII (`parseIdentification`), so a byte above 0x7F
    /// would arrive as U+FFFD and name another device; such ids are refused. An empty id
    /// is refused too: a zero length is how a data frame starts, so Traccar would read it
    /// as one.
    package static func identification(uniqueID: String) throws(TeltonikaCodecError) -> [UInt8] {
        let bytes = Array(uniqueID.utf8)
        guard !bytes.isEmpty else {
            throw .identifier("an empty device id cannot identify on Traccar's Teltonika port")
        }
        guard bytes.allSatisfy({ $0 < 0x80 }) else {
            throw .identifier(
                "device id \"\(uniqueID.prefix(40))\" is not ASCII; Traccar's Teltonika port reads ids as US-ASCII")
        }
        // Far above any real id (IMEIs are 15 digits), and keeps the length's high byte off 0xFF,
        // which Traccar's frame decoder takes for a one-byte ping.
        guard bytes.count <= 1024 else { throw .identifier("device id longer than 1024 bytes") }
        return [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xFF)] + bytes
    }

    /// Whether `identification` must go out in the same write as the first data frame,
    /// because alone it is shorter than the 12 bytes Traccar waits for.
    package static func identificationNeedsCompanion(_ identification: [UInt8]) -> Bool {
        identification.count < frameDecoderMinimumBytes
    }

    /// Traccar's 1-byte answer to an identification.
    package enum IdentificationAnswer: Sendable, Equatable {
        /// `0x01`: the server knows the device; data frames will be answered.
        case known
        /// `0x00`: the server does not know the device; it drops data frames unanswered.
        case unknown
    }

    /// Reads the answer to an identification; any byte but `0x00` and `0x01` is not Traccar.
    package static func identificationAnswer(_ byte: UInt8) throws(TeltonikaCodecError) -> IdentificationAnswer {
        switch byte {
        case 0x01: return .known
        case 0x00: return .unknown
        default:
            throw .answer(
                "identification answered 0x\(String(byte, radix: 16, uppercase: true)), not Traccar's 0x00 or 0x01")
        }
    }

    // MARK: Data frames

    /// A codec 8 Extended data frame holding `records`, in order.
    ///
    /// Layout: 4 zero bytes, the data length (codec id through the second count) in 4 bytes,
    /// the codec id `0x8E`, the record count in 1 byte, the records, the count again, and the
    /// CRC-16/IBM of codec id through second count in 4 bytes (the top two zero). All big-endian.
    ///
    /// - Precondition: 1 to 255 records, and at most ``maxFrameBytes`` in all; size batches
    ///   with ``recordsFitting(_:)``.
    package static func dataFrame(records: some Collection<Record>) -> [UInt8] {
        precondition(
            (1...maxRecordsPerFrame).contains(records.count),
            "a Teltonika frame holds 1 to 255 records, not \(records.count)")
        let dataLength = 3 + records.reduce(0) { $0 + $1.encodedSize }
        precondition(
            dataLength + 12 <= maxFrameBytes, "a Teltonika frame of \(dataLength + 12) bytes exceeds \(maxFrameBytes)")
        var out: [UInt8] = []
        out.reserveCapacity(dataLength + 12)
        out.append(contentsOf: [0, 0, 0, 0])
        out.appendBigEndian(UInt32(dataLength))
        out.append(codec8Extended)
        out.append(UInt8(records.count))
        for record in records { record.encode(into: &out) }
        out.append(UInt8(records.count))
        out.appendBigEndian(UInt32(crc16IBM(out[8...])))
        return out
    }

    /// How many of `records`, from the first, fit in one data frame (count and bytes).
    ///
    /// Zero only when `records` is empty: every record the codec builds fits alone.
    package static func recordsFitting(_ records: some Collection<Record>) -> Int {
        var bytes = frameOverheadBytes
        var count = 0
        for record in records {
            guard count < maxRecordsPerFrame, bytes + record.encodedSize <= maxFrameBytes else { break }
            bytes += record.encodedSize
            count += 1
        }
        return count
    }

    /// Traccar's answer to a data frame: the frame's record count, 4 bytes big-endian.
    ///
    /// Traccar answers the count from the frame's header (`response.writeInt(count)` in
    /// `parseData`), not how many it kept, and only after every record decoded; so any
    /// other number means the answer is not to this frame.
    package static func parseAcknowledgement(_ bytes: some Collection<UInt8>) throws(TeltonikaCodecError) -> Int {
        guard bytes.count == 4 else { throw .answer("a data frame's answer is 4 bytes, not \(bytes.count)") }
        return bytes.reduce(0) { $0 << 8 | Int($1) }
    }

    /// CRC-16/IBM as Traccar's `Checksum.CRC16_IBM` computes it: polynomial 0x8005
    /// reflected (0xA001), initial value 0, no final XOR (also known as CRC-16/ARC).
    package static func crc16IBM(_ bytes: some Sequence<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc ^= UInt16(byte)
            for _ in 0..<8 {
                crc = crc & 1 != 0 ? (crc >> 1) ^ 0xA001 : crc >> 1
            }
        }
        return crc
    }
}

extension TeltonikaCodec {
    /// One AVL record of codec 8 Extended, in the wire's own units.
    ///
    /// Build one from a ``Position`` with ``TeltonikaCodec/record(from:satellites:)``;
    /// the memberwise init (internal: `@testable` tests) reproduces any frame byte for byte.
    package struct Record: Sendable, Equatable {
        /// Fix time, milliseconds since the Unix epoch (Traccar: `new Date(buf.readLong())`).
        package var timeMs: Int64
        /// Traccar stores it as the `priority` attribute and nothing else.
        package var priority = Priority.low
        /// Degrees × 10⁷, signed (Traccar: `buf.readInt() / 10000000.0`).
        package var longitudeE7: Int32
        package var latitudeE7: Int32
        /// Metres, signed.
        package var altitude: Int16 = 0
        /// Course over ground, whole degrees.
        package var angle: UInt16 = 0
        /// Traccar marks the position invalid when this is 0 (`position.setValid(satellites != 0)`).
        package var satellites: UInt8
        /// Whole km/h (Traccar stores `knotsFromKph(value)`).
        package var speedKmh: UInt16 = 0
        /// The IO id that triggered the record, 0 for none; Traccar stores it as the `event` attribute.
        package var eventID: UInt16 = 0
        package var io = IOElements()

        /// Bytes this record takes in a frame.
        package var encodedSize: Int {
            minimumRecordBytes
                + io.oneByte.count * 3 + io.twoBytes.count * 4 + io.fourBytes.count * 6 + io.eightBytes.count * 10
                + io.variable.reduce(0) { $0 + 4 + $1.bytes.count }
        }

        func encode(into out: inout [UInt8]) {
            out.appendBigEndian(UInt64(bitPattern: timeMs))
            out.append(priority.rawValue)
            out.appendBigEndian(UInt32(bitPattern: longitudeE7))
            out.appendBigEndian(UInt32(bitPattern: latitudeE7))
            out.appendBigEndian(UInt16(bitPattern: altitude))
            out.appendBigEndian(angle)
            out.append(satellites)
            out.appendBigEndian(speedKmh)
            out.appendBigEndian(eventID)
            // Traccar skips this total (`readExtByte(...) // total IO data records`);
            // Teltonika's own definition counts every element, the variable ones included.
            precondition(io.count <= Int(UInt16.max), "more than 65535 IO elements in one record")
            out.appendBigEndian(UInt16(io.count))
            func section<V: FixedWidthInteger>(_ elements: [IOElement<V>]) {
                out.appendBigEndian(UInt16(elements.count))
                for element in elements {
                    out.appendBigEndian(element.id)
                    out.appendBigEndian(element.value)
                }
            }
            section(io.oneByte)
            section(io.twoBytes)
            section(io.fourBytes)
            section(io.eightBytes)
            out.appendBigEndian(UInt16(io.variable.count))
            for element in io.variable {
                precondition(element.bytes.count <= Int(UInt16.max), "a variable IO element longer than 65535 bytes")
                out.appendBigEndian(element.id)
                out.appendBigEndian(UInt16(element.bytes.count))
                out.append(contentsOf: element.bytes)
            }
        }
    }

    /// A record's priority byte: Teltonika's 0 low, 1 high, 2 panic.
    ///
    /// Traccar only stores it (`position.set("priority", buf.readUnsignedByte())`); it raises
    /// no alarm from it. The relay sets it so a reader of the raw attributes sees urgency.
    package enum Priority: UInt8, Sendable, Equatable {
        case low = 0
        case high = 1
        case panic = 2
    }

    /// One fixed-width IO element: an id and a value of 1, 2, 4 or 8 bytes.
    package struct IOElement<Value: FixedWidthInteger & UnsignedInteger & Sendable>: Sendable, Equatable {
        package var id: UInt16
        package var value: Value

        package init(_ id: UInt16, _ value: Value) {
            self.id = id
            self.value = value
        }
    }

    /// One variable-length IO element (codec 8 Extended's NX section).
    package struct VariableIOElement: Sendable, Equatable {
        package var id: UInt16
        package var bytes: [UInt8]

        package init(_ id: UInt16, _ bytes: [UInt8]) {
            self.id = id
            self.bytes = bytes
        }
    }

    /// A record's IO elements, by section, in the order they go on the wire.
    ///
    /// The section decides how many bytes Traccar reads: its handler for an id reads its own
    /// width and then moves to where the section's width says the element ends
    /// (`decodeParameter`: `buf.readerIndex(index + length)`), so an element in the wrong
    /// section arrives as a wrong number. The mapping from positions keeps each id in the
    /// section its Traccar handler reads.
    package struct IOElements: Sendable, Equatable {
        package var oneByte: [IOElement<UInt8>] = []
        package var twoBytes: [IOElement<UInt16>] = []
        package var fourBytes: [IOElement<UInt32>] = []
        package var eightBytes: [IOElement<UInt64>] = []
        package var variable: [VariableIOElement] = []

        /// Every element, all sections.
        package var count: Int { oneByte.count + twoBytes.count + fourBytes.count + eightBytes.count + variable.count }
    }
}

/// Why the Teltonika codec refused an id or an answer.
package struct TeltonikaCodecError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong, for logs. Never holds secrets.
    package let message: String

    /// A device id the port cannot carry.
    package static func identifier(_ message: String) -> Self { Self(message: message) }
    /// Bytes that are not Traccar's answer.
    package static func answer(_ message: String) -> Self { Self(message: message) }

    package var description: String { message }
}

extension [UInt8] {
    fileprivate mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }
}

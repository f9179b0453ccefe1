/// Iridium DirectIP, mobile-originated (the SBD Service Developers Guide): how the gateway hands a
/// modem's message to a shore server. It connects, writes one message, and closes, or first
/// waits for the server's confirmation when the account asks for one.
///
/// A message: protocol revision (1, = 1), the length of what follows (2), then information
/// elements, each an id (1), a length (2) and its bytes, all big-endian:
/// - `0x01` MO header (28): CDR reference (4), IMEI (15 ASCII digits), session status (1), MOMSN
///   (2), MTMSN (2), time of session (4, seconds since 1970);
/// - `0x02` MO payload (1–1960): the modem's message; none for a mailbox check or a failed session;
/// - `0x03` MO location (11): the satellite's estimate of where the modem was, and its radius;
/// - `0x05` confirmation (1): what the server answers, 1 taken, 0 not.
///
/// Elements of other ids are skipped by their length, as the guide asks of a receiver.
package struct DirectIPMessage: Sendable, Equatable {
    package static let protocolRevision: UInt8 = 1
    /// The largest payload the gateway carries in one element.
    package static let maximumPayload = 1960
    /// What a message may hold in all: revision, length, and the length's largest value.
    package static let maximumBytes = 3 + Int(UInt16.max)

    package var cdrReference: UInt32
    package var imei: String
    /// The gateway's session status: 0–2 the session went (1: an MT message too large, 2: the
    /// location unacceptable); 10, 12–15 it failed.
    package var sessionStatus: UInt8
    package var momsn: UInt16
    package var mtmsn: UInt16
    package var sessionTimeSeconds: Int64
    /// nil: no payload (a mailbox check, or a session that failed).
    package var payload: [UInt8]?

    package init(
        cdrReference: UInt32, imei: String, sessionStatus: UInt8, momsn: UInt16, mtmsn: UInt16,
        sessionTimeSeconds: Int64, payload: [UInt8]?
    ) {
        self.cdrReference = cdrReference
        self.imei = imei
        self.sessionStatus = sessionStatus
        self.momsn = momsn
        self.mtmsn = mtmsn
        self.sessionTimeSeconds = sessionTimeSeconds
        self.payload = payload
    }

    /// The session delivered the modem's message (status 0–2).
    package var sessionSucceeded: Bool { sessionStatus <= 2 }

    /// How many bytes the whole message takes, once its first three are there; nil before.
    package static func expectedLength(_ prefix: some Collection<UInt8>) -> Int? {
        guard prefix.count >= 3 else { return nil }
        let bytes = Array(prefix.prefix(3))
        return 3 + (Int(bytes[1]) << 8 | Int(bytes[2]))
    }

    /// The server's answer when the account asks for confirmations: taken or not.
    package static func confirmation(taken: Bool) -> [UInt8] {
        [protocolRevision, 0, 4, 0x05, 0, 1, taken ? 1 : 0]
    }

    /// One whole message, every length checked against the bytes it claims.
    package static func decode(_ bytes: [UInt8]) throws(SBDMessageError) -> DirectIPMessage {
        guard bytes.count >= 3 else { throw SBDMessageError("a DirectIP message of \(bytes.count) bytes") }
        guard bytes[0] == protocolRevision else {
            throw SBDMessageError("DirectIP protocol revision \(bytes[0]) is not 1")
        }
        let length = expectedLength(bytes)!
        guard length == bytes.count else {
            throw SBDMessageError(
                "a DirectIP message says \(length - 3) bytes follow its header; \(bytes.count - 3) do")
        }
        var header: DirectIPMessage?
        var payload: [UInt8]?
        var offset = 3
        while offset < bytes.count {
            guard bytes.count - offset >= 3 else {
                throw SBDMessageError("a DirectIP element cut short at byte \(offset)")
            }
            let id = bytes[offset]
            let size = Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
            let start = offset + 3
            guard bytes.count - start >= size else {
                throw SBDMessageError(
                    "DirectIP element 0x\(hex(id)) at byte \(offset) says \(size) bytes; \(bytes.count - start) are left"
                )
            }
            let content = Array(bytes[start..<(start + size)])
            switch id {
            case 0x01:
                guard header == nil else { throw SBDMessageError("a second DirectIP MO header at byte \(offset)") }
                header = try moHeader(content, at: offset)
            case 0x02:
                guard payload == nil else { throw SBDMessageError("a second DirectIP MO payload at byte \(offset)") }
                guard (1...maximumPayload).contains(size) else {
                    throw SBDMessageError(
                        "a DirectIP MO payload of \(size) bytes at byte \(offset) (1–\(maximumPayload))")
                }
                payload = content
            default:
                break // location, and anything newer: skipped by its length
            }
            offset = start + size
        }
        guard var message = header else { throw SBDMessageError("a DirectIP message with no MO header") }
        message.payload = payload
        return message
    }

    /// The whole message as the gateway writes it (the fake gateway's, and tests').
    package func encode() -> [UInt8] {
        var elements: [UInt8] = [0x01, 0, 28]
        for shift in stride(from: 24, through: 0, by: -8) {
            elements.append(UInt8(truncatingIfNeeded: cdrReference >> shift))
        }
        elements += Array(imei.utf8.prefix(15))
        elements += [sessionStatus, UInt8(momsn >> 8), UInt8(momsn & 0xFF), UInt8(mtmsn >> 8), UInt8(mtmsn & 0xFF)]
        let time = UInt32(clamping: sessionTimeSeconds)
        for shift in stride(from: 24, through: 0, by: -8) { elements.append(UInt8(truncatingIfNeeded: time >> shift)) }
        if let payload {
            elements += [0x02, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)] + payload
        }
        return [Self.protocolRevision, UInt8(elements.count >> 8), UInt8(elements.count & 0xFF)] + elements
    }

    private static func moHeader(_ content: [UInt8], at offset: Int) throws(SBDMessageError) -> DirectIPMessage {
        guard content.count == 28 else {
            throw SBDMessageError("a DirectIP MO header of \(content.count) bytes at byte \(offset) (28)")
        }
        func number(_ range: Range<Int>) -> UInt64 { content[range].reduce(0) { $0 << 8 | UInt64($1) } }
        let imei = content[4..<19]
        guard imei.allSatisfy({ (0x30...0x39).contains($0) }) else {
            throw SBDMessageError("the DirectIP MO header's IMEI at byte \(offset + 7) is not 15 digits")
        }
        return DirectIPMessage(
            cdrReference: UInt32(number(0..<4)), imei: String(decoding: imei, as: UTF8.self),
            sessionStatus: content[19],
            momsn: UInt16(number(20..<22)), mtmsn: UInt16(number(22..<24)), sessionTimeSeconds: Int64(number(24..<28)),
            payload: nil)
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
    }
}

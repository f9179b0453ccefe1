import GeoRelayCore
import GeoRelayTestTraits
import Testing

/// Iridium DirectIP MO as the gateway writes it (the SBD Service Developers Guide): what the shore
/// relay takes, what it skips, and what it refuses.
@Suite(.offThePool) struct DirectIPTests {
    static let message = DirectIPMessage(
        cdrReference: 0x0102_0304, imei: "300434063904790", sessionStatus: 0, momsn: 513, mtmsn: 0,
        sessionTimeSeconds: 1_784_953_800, payload: Array("georelay".utf8))

    @Test func aMessageComesBackWithEveryField() throws {
        let bytes = Self.message.encode()
        #expect(bytes.count == 3 + 31 + 3 + 8)
        #expect(DirectIPMessage.expectedLength(bytes.prefix(3)) == bytes.count)
        #expect(DirectIPMessage.expectedLength(bytes.prefix(2)) == nil)
        let decoded = try DirectIPMessage.decode(bytes)
        #expect(decoded == Self.message && decoded.sessionSucceeded)
    }

    /// A location element (and any id this relay does not know) is skipped by its length; a mailbox
    /// check or a failed session comes with no payload, and is taken as such.
    @Test func elementsNotReadAreSkippedAndAMessageMayHaveNoPayload() throws {
        var bytes = Self.message.encode()
        let location: [UInt8] = [0x03, 0, 11, 0x01, 59, 0x1F, 0x40, 10, 0x2E, 0xE0, 0, 0, 0, 4]
        let unknown: [UInt8] = [0x7E, 0, 2, 0xAA, 0xBB]
        bytes += location + unknown
        let length = bytes.count - 3
        bytes[1] = UInt8(length >> 8)
        bytes[2] = UInt8(length & 0xFF)
        #expect(try DirectIPMessage.decode(bytes).payload == Array("georelay".utf8))

        var check = Self.message
        check.payload = nil
        check.sessionStatus = 13
        let decoded = try DirectIPMessage.decode(check.encode())
        #expect(decoded.payload == nil && !decoded.sessionSucceeded)
    }

    @Test func theConfirmationIsOneElementOfOneByte() {
        #expect(DirectIPMessage.confirmation(taken: true) == [1, 0, 4, 5, 0, 1, 1])
        #expect(DirectIPMessage.confirmation(taken: false) == [1, 0, 4, 5, 0, 1, 0])
    }

    @Test func badFramesAreRefusedWithWhatAndWhere() {
        let bytes = Self.message.encode()
        for cut in 0..<bytes.count {
            #expect(throws: SBDMessageError.self, "cut to \(cut)") {
                try DirectIPMessage.decode(Array(bytes.prefix(cut)))
            }
        }
        func refusal(_ bytes: [UInt8]) -> String {
            do {
                _ = try DirectIPMessage.decode(bytes)
                return ""
            } catch {
                return error.message
            }
        }
        var revision = bytes
        revision[0] = 2
        #expect(refusal(revision).contains("revision 2"))
        #expect(refusal(bytes + [0]).contains("says 42 bytes follow"))
        var imei = bytes
        imei[3 + 3 + 4] = UInt8(ascii: "x")
        #expect(refusal(imei).contains("IMEI"))
        var longPayload = bytes
        longPayload[3 + 31 + 2] = 200
        #expect(refusal(longPayload).contains("element 0x02 at byte 34 says 200 bytes"))
        let noHeader: [UInt8] = [1, 0, 5, 0x02, 0, 2, 1, 2]
        #expect(refusal(noHeader).contains("no MO header"))
        let emptyPayload: [UInt8] = [1, 0, 3, 0x02, 0, 0]
        #expect(refusal(emptyPayload).contains("payload of 0 bytes"))
    }

    @Test(arguments: [1, 2] as [UInt64])
    func randomBytesAreAMessageOrARefusal(seed: UInt64) {
        var random = SeededRandom(seed: seed)
        let valid = Self.message.encode()
        for _ in 0..<3000 {
            var bytes = valid
            for _ in 0...(random.next() % 4) {
                bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
            }
            guard let message = try? DirectIPMessage.decode(bytes) else { continue }
            #expect(message.imei.count == 15 && message.imei.allSatisfy(\.isNumber), "seed \(seed): \(bytes)")
        }
    }
}

import GeoRelayCore
import GeoRelayTestTraits
import Testing

/// The relay's SBD message: what a credit carries, what comes back out ashore, and what a shore
/// relay refuses.
@Suite(.offThePool) struct SBDMessageTests {
    /// 2026-07-25T04:30:00Z.
    static let now: Int64 = 1_784_953_800
    static let roster = SBDMessage.rosterCheck(["gps-bow", "gps-stern", "ais", "mob"])

    /// A vessel's four receivers, metres apart, their fixes a second or two apart.
    static let vessel: [SBDMessage.Fix] = [
        .init(unit: 0, timeSeconds: now, lat: 59.91273, lon: 10.74609, speedKnots: 6.5, course: 47),
        .init(unit: 1, timeSeconds: now - 1, lat: 59.91265, lon: 10.74594, speedKnots: 6.5, course: 46),
        .init(unit: 2, timeSeconds: now - 2, lat: 59.91270, lon: 10.74601, speedKnots: 6, course: 48),
        .init(unit: 3, timeSeconds: now, lat: 59.91268, lon: 10.74600, speedKnots: 6.5, course: 47),
    ]

    static func expectClose(_ decoded: SBDMessage.Fix, _ sent: SBDMessage.Fix, _ note: String = "") {
        #expect(decoded.unit == sent.unit && decoded.timeSeconds == sent.timeSeconds, "\(note)")
        // 1e-5° steps: within half a step (0.56 m of latitude).
        #expect(abs(decoded.lat - sent.lat) <= 0.000_005_01 && abs(decoded.lon - sent.lon) <= 0.000_005_01, "\(note)")
        if let speed = sent.speedKnots { #expect(abs(decoded.speedKnots! - min(speed, 63)) <= 0.25, "\(note)") }
        if let course = sent.course { #expect(abs(decoded.course! - course) <= 0.5, "\(note)") }
        #expect(decoded.alarm == sent.alarm, "\(note)")
    }

    @Test func aFourUnitVesselsCurrentPositionsFitOneCreditAtUnderTenBytesEach() throws {
        let message = SBDMessage(relayID: 7, sequence: 1234, roster: Self.roster, fixes: Self.vessel)
        let bytes = try message.encode()
        #expect(bytes.count <= SBDMessage.creditBytes, "\(bytes.count) bytes")
        // Amortised over the four, the header included.
        #expect(Double(bytes.count) / 4 <= 10, "\(Double(bytes.count) / 4) bytes a position")
        let decoded = try SBDMessage.decode(bytes)
        #expect(decoded.relayID == 7 && decoded.sequence == 1234 && decoded.roster == Self.roster)
        #expect(decoded.fixes.count == 4)
        for (got, sent) in zip(decoded.fixes, Self.vessel) { Self.expectClose(got, sent) }
        // Decoding what was decoded gives the same bytes: nothing is lost twice.
        #expect(try decoded.encode() == bytes)
    }

    @Test func anAlarmWithItsPositionAndUnitFitsOneCredit() throws {
        let sos = SBDMessage.Fix(
            unit: 3, timeSeconds: Self.now, lat: -33.85678, lon: 151.21500, speedKnots: 0, course: nil, alarm: "sos")
        let bytes = try SBDMessage(relayID: 70_000, sequence: 4_000_000_000, roster: Self.roster, fixes: [sos])
            .encode()
        #expect(bytes.count <= SBDMessage.creditBytes)
        let decoded = try SBDMessage.decode(bytes)
        #expect(decoded.relayID == 70_000 && decoded.sequence == 4_000_000_000)
        Self.expectClose(decoded.fixes[0], sos)
        #expect(decoded.fixes[0].course == nil && decoded.fixes[0].speedKnots == 0)
    }

    /// Units of a fleet far apart, across the antimeridian and at the poles: each place goes whole
    /// when a difference would be longer, and every one comes back.
    @Test func placesFarApartAndAtTheEdgesComeBack() throws {
        let fixes: [SBDMessage.Fix] = [
            .init(unit: 0, timeSeconds: Self.now, lat: 90, lon: 180),
            .init(unit: 1, timeSeconds: Self.now - 3600, lat: -90, lon: -180),
            .init(unit: 2, timeSeconds: Self.now, lat: 0.00001, lon: 179.99999),
            .init(unit: 3, timeSeconds: Self.now, lat: 0, lon: -179.99999),
            .init(unit: 31, timeSeconds: Self.now - 86_400 * 30, lat: 59.9, lon: 10.7, speedKnots: 200, course: 359.7),
        ]
        let decoded = try SBDMessage.decode(try SBDMessage(relayID: 0, sequence: 0, roster: 0, fixes: fixes).encode())
        #expect(decoded.fixes.count == fixes.count)
        for (index, (got, sent)) in zip(decoded.fixes, fixes).enumerated() {
            if index == 4 {
                // Speed past 63 knots goes as 63; a course of 359.7° rounds to north.
                #expect(got.speedKnots == 63 && got.course == 0)
            } else {
                Self.expectClose(got, sent, "fix \(index)")
            }
        }
    }

    @Test func whatTheFormCannotCarryIsRefusedByName() {
        let fix = Self.vessel[0]
        func refused(_ change: (inout SBDMessage.Fix) -> Void) -> String? {
            var bad = fix
            change(&bad)
            do {
                _ = try SBDMessage(relayID: 0, sequence: 0, roster: 0, fixes: [fix, bad]).encode()
                return nil
            } catch {
                return error.message
            }
        }
        #expect(refused { $0.unit = 32 }?.contains("fix 1: unit 32") == true)
        #expect(refused { $0.lat = 90.5 }?.contains("fix 1") == true)
        #expect(refused { $0.lon = .nan }?.contains("not a place on Earth") == true)
        #expect(refused { $0.alarm = "custom" }?.contains("alarm \"custom\"") == true)
        #expect(
            refused {
                $0.timeSeconds = SBDMessage.epochSeconds - 10
                $0.unit = 1
            } != nil)
        #expect(throws: SBDMessageError.self) { try SBDMessage(relayID: 0, sequence: 0, roster: 0, fixes: []).encode() }
    }

    /// Every prefix of a message is refused with what was missing; so is every other version, a
    /// place relative to nothing, an unknown alarm code and bytes left over.
    @Test func badBytesAreRefusedWithWhatAndWhere() throws {
        var fixes = Self.vessel
        fixes[2].alarm = "sos"
        let bytes = try SBDMessage(relayID: 300, sequence: 5, roster: Self.roster, fixes: fixes).encode()
        let headerEnd = 1 + 2 + 1 + 1 + 1 + 4
        for cut in 0..<bytes.count {
            #expect(throws: SBDMessageError.self, "a message cut to \(cut) bytes") {
                _ = try SBDMessage.decode(Array(bytes.prefix(cut)))
            }
        }
        var version = bytes
        version[0] = 2
        #expect(Self.refusal(version)?.contains("format version 2") == true)
        var relativeFirst = bytes
        relativeFirst[headerEnd] |= 0x40
        #expect(Self.refusal(relativeFirst)?.contains("relative to no fix") == true)
        #expect(Self.refusal(bytes + [0x00])?.contains("1 bytes after the last of 4 fixes") == true)
        let alarmAt = bytes.lastIndex(of: UInt8(SBDMessage.alarmCodes.firstIndex(of: "sos")! + 1))!
        var alarm = bytes
        alarm[alarmAt] = 200
        #expect(Self.refusal(alarm)?.contains("alarm code 200") == true)
    }

    /// Random bytes, and valid messages with random bytes changed, from a seed: each is a message
    /// whose every fix is a place on Earth, or a refusal; never a trap.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func randomBytesAreAMessageInRangeOrARefusal(seed: UInt64) throws {
        var random = SeededRandom(seed: seed)
        let valid = try SBDMessage(relayID: 9, sequence: 77, roster: Self.roster, fixes: Self.vessel).encode()
        for round in 0..<2000 {
            var bytes: [UInt8]
            if round % 2 == 0 {
                bytes = (0..<Int(random.next() % 60)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                if !bytes.isEmpty { bytes[0] = SBDMessage.version }
            } else {
                bytes = valid
                for _ in 0...(random.next() % 3) {
                    bytes[Int(random.next() % UInt64(bytes.count))] = UInt8(truncatingIfNeeded: random.next())
                }
            }
            guard let message = try? SBDMessage.decode(bytes) else { continue }
            for fix in message.fixes {
                #expect(abs(fix.lat) <= 90 && abs(fix.lon) <= 180, "seed \(seed) round \(round): \(bytes)")
                #expect(fix.timeSeconds >= SBDMessage.epochSeconds, "seed \(seed) round \(round): \(bytes)")
            }
        }
    }

    @Test func theRosterCheckTellsListsApartAndAlarmsMapToTraccarsNames() {
        let check = SBDMessage.rosterCheck(["gps-bow", "gps-stern"])
        #expect(check == SBDMessage.rosterCheck(["gps-bow", "gps-stern"]))
        #expect(check != SBDMessage.rosterCheck(["gps-stern", "gps-bow"]))
        #expect(check != SBDMessage.rosterCheck(["gps-bow", "gps-stern", "ais"]))
        #expect(SBDMessage.alarmName(for: "overspeed,sos") == "overspeed")
        #expect(SBDMessage.alarmName(for: "custom, sos") == "sos")
        #expect(SBDMessage.alarmName(for: "bilge") == "general")
    }

    static func refusal(_ bytes: [UInt8]) -> String? {
        do {
            _ = try SBDMessage.decode(bytes)
            return nil
        } catch {
            return error.message
        }
    }
}

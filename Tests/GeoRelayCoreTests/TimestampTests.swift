import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

@Suite(.offThePool) struct TimestampTests {
    @Test(arguments: [
        ("2026-07-25T04:30:00Z", Int64(1_784_953_800_000)),
        ("2026-07-25T04:30:00.123Z", Int64(1_784_953_800_123)),
        ("2026-07-25T06:30:00+02:00", Int64(1_784_953_800_000)),
        ("2026-07-25T01:00:00-0330", Int64(1_784_953_800_000)),
        ("1970-01-01T00:00:00Z", Int64(0)),
        ("2024-02-29T12:00:00.5Z", Int64(1_709_208_000_500)),
    ])
    func parsesISO8601WithZone(text: String, expected: Int64) {
        #expect(Timestamp.milliseconds(fromISO8601: text) == expected)
    }

    @Test(arguments: [
        "2026-07-25T04:30:00", "2026-13-01T00:00:00Z", "2025-02-29T00:00:00Z", "2026-07-25", "yesterday",
        "2026-07-25T04:30:00Zjunk",
    ])
    func rejectsInvalidISO8601(text: String) {
        #expect(Timestamp.milliseconds(fromISO8601: text) == nil)
    }

    @Test func unixSecondsAndMilliseconds() {
        #expect(Timestamp.milliseconds(fromUnix: 1_732_900_000) == 1_732_900_000_000)
        #expect(Timestamp.milliseconds(fromUnix: 1_732_900_000_123) == 1_732_900_000_123)
        #expect(Timestamp.milliseconds(fromUnix: 1_732_900_000.25) == 1_732_900_000_250)
        #expect(Timestamp.milliseconds(fromUnix: -1) == nil)
        #expect(Timestamp.milliseconds(fromUnix: .nan) == nil)
    }

    @Test func formatsUTCWithMilliseconds() {
        #expect(Timestamp.iso8601(milliseconds: 1_784_953_800_000) == "2026-07-25T04:30:00.000Z")
        #expect(Timestamp.iso8601(milliseconds: 1_709_208_000_500) == "2024-02-29T12:00:00.500Z")
        for ms in stride(from: Int64(0), to: 4_102_444_800_000, by: 86_399_999_937) {
            #expect(Timestamp.milliseconds(fromISO8601: Timestamp.iso8601(milliseconds: ms)) == ms)
        }
    }
}

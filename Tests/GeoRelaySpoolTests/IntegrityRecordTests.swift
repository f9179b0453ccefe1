import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// A vessel's integrity as the spool keeps it for `status`: held state, the latest change
/// standing, the episodes counted, there after a reopen.
@Suite(.offThePool) struct IntegrityRecordTests {
    @Test func theLatestChangeStandsAndEpisodesAreCounted() async throws {
        let fixture = SpoolFixture()
        fixture.settings.stateInterval = .seconds(60)
        var spool = try fixture.open()
        spool.record(
            integrity: IntegrityRecord(
                device: "boat", state: "spoofed", sinceMs: 1_000, evidence: "gps-1: a jump of 12 km in 1 s"),
            beganEpisode: true)
        // Held like acknowledgements: a commit of positions does not carry it.
        _ = await spool.append([fix("x", 1)])
        #expect(try SpoolReader.open(path: fixture.settings.path).integrity().isEmpty, "the change is still held")
        await spool.flush()
        var records = try SpoolReader.open(path: fixture.settings.path).integrity()
        #expect(
            records["boat"]
                == IntegrityRecord(
                    device: "boat", state: "spoofed", sinceMs: 1_000, evidence: "gps-1: a jump of 12 km in 1 s",
                    episodes: 1))

        // Clear again, then a second episode: the state is the newest, the episodes add up.
        spool.record(
            integrity: IntegrityRecord(device: "boat", state: "ok", sinceMs: 61_000, evidence: ""), beganEpisode: false)
        spool.record(
            integrity: IntegrityRecord(
                device: "boat", state: "jammed", sinceMs: 90_000, evidence: "gps-1, gps-2: C/N0 collapsed"),
            beganEpisode: true)
        await spool.flush()
        spool.close()
        spool = try fixture.open()
        defer { spool.close() }
        let status = try SpoolReader.open(path: fixture.settings.path).status()
        records = status.integrity
        #expect(records["boat"]?.state == "jammed" && records["boat"]?.sinceMs == 90_000)
        #expect(records["boat"]?.episodes == 2)
        #expect(records["x"] == nil, "a device the watch never judged has no record")
    }
}

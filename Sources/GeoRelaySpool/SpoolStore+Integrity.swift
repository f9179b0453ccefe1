import GeoRelayCore

/// A vessel's integrity watch as the crew reads it after the fact (`status`, the page, the
/// metrics): its state, since when, the evidence that set it, and how many episodes of
/// jamming or spoofing it has had. The ingest side's monitor lives in memory; this is what
/// another process (`georelay status`) and the next life of the relay can see of it.
package struct IntegrityRecord: Sendable, Equatable {
    package var device: String
    /// `IntegrityState.rawValue`: `ok`, `degraded`, `jammed` or `spoofed`.
    package var state: String
    /// Wall time the state was entered.
    package var sinceMs: Int64
    /// The evidence standing when it was entered, in plain words; empty for `ok`.
    package var evidence: String
    /// Episodes of `jammed` or `spoofed` so far (the one this record opens included).
    package var episodes: Int64

    package init(device: String, state: String, sinceMs: Int64, evidence: String, episodes: Int64 = 0) {
        self.device = device
        self.state = state
        self.sinceMs = sinceMs
        self.evidence = evidence
        self.episodes = episodes
    }
}

/// Held state, like the acknowledgements: written with the next commit of state (an episode's
/// alarm goes to the destinations with the position itself, not through this).
extension SpoolStore {
    /// `beganEpisode`: this change opened an episode of jamming or spoofing (it is counted).
    func insert(_ record: IntegrityRecord, beganEpisode: Bool) throws {
        let upsert = try db.statement(
            """
            INSERT INTO integrity(device, state, since_ms, evidence, episodes) VALUES(?1, ?2, ?3, ?4, ?5)
            ON CONFLICT(device) DO UPDATE SET state = ?2, since_ms = ?3, evidence = ?4, episodes = episodes + ?5
            """)
        try upsert.run(with: record.device, record.state, record.sinceMs, record.evidence, beganEpisode ? 1 : 0)
    }
}

extension SpoolReader {
    /// Each watched vessel's record, by device; a vessel whose watch never left `ok` has none.
    package func integrity() throws(SpoolError) -> [String: IntegrityRecord] {
        try wrap { try integrityRecords() }
    }

    /// The same, inside a read the caller already wraps (`status`).
    func integrityRecords() throws -> [String: IntegrityRecord] {
        let select = try db.statement("SELECT device, state, since_ms, evidence, episodes FROM integrity")
        var records: [String: IntegrityRecord] = [:]
        while try select.step() {
            let device = select.text(0) ?? ""
            records[device] = IntegrityRecord(
                device: device, state: select.text(1) ?? "ok", sinceMs: select.int64(2),
                evidence: select.text(3) ?? "", episodes: select.int64(4))
        }
        return records
    }
}

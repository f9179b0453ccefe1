import Foundation
import GeoRelayCore
import GeoRelayTestTraits
import Testing

@testable import GeoRelaySpool

/// The replay queue as storage: the writer stores the seqs it is given for a destination, each
/// once, and refuses a destination the spool does not know. Which seqs go is decided outside
/// the spool (`ReplaySelection`, tested with the service).
@Suite(.offThePool) struct ReplayQueueTests {
    @Test func theWriterQueuesTheSeqsItIsGivenOnce() async throws {
        let fixture = SpoolFixture()
        let spool = try fixture.open()
        try await spool.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        let positions = (0..<10).map { fix("boat", Int64($0)) }
        let seqs = await spool.append(positions).compactMap(\.seq)
        #expect(try await spool.queueReplay(destination: "traccar", seqs: [seqs[2], seqs[5]]) == 2)
        // Queued already: counted once, stored once.
        #expect(try await spool.queueReplay(destination: "traccar", seqs: [seqs[5], seqs[7]]) == 1)
        let queued = try spool.makeReader().replayQueue(destination: "traccar", limit: 100).map(\.seq)
        #expect(queued == [seqs[2], seqs[5], seqs[7]])
        await #expect(throws: SpoolError.self) {
            try await spool.queueReplay(destination: "elsewhere", seqs: [seqs[0]])
        }
        spool.close()
    }

    @Test func aCommandsWriterNeverCreatesASpool() throws {
        let fixture = SpoolFixture()
        #expect {
            try Spool.openExisting(settings: fixture.settings)
        } throws: { error in
            (error as? SpoolError)?.code == .notFound
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.settings.path))
    }

    /// The daemon's writer, five positions of "boat" stored for "traccar", then a command's
    /// writer opened beside it (as `replay` and `logs --clear` open theirs).
    private func daemonAndCommand() async throws -> (
        fixture: SpoolFixture, daemon: Spool, command: Spool, seqs: [Int64]
    ) {
        let fixture = SpoolFixture()
        let daemon = try fixture.open()
        try await daemon.register(destinations: [DestinationRegistration(name: "traccar", buffered: true)])
        let seqs = await daemon.append((0..<5).map { fix("boat", Int64($0)) }).compactMap(\.seq)
        return (fixture, daemon, try Spool.openExisting(settings: fixture.settings), seqs)
    }

    /// A writer that read at open (its recent positions, the next seq) and then saw the other
    /// writer commit must still write: before, that read's snapshot was still open, and SQLite
    /// refused the write transaction at once with SQLITE_BUSY, without waiting.
    @Test func aWriterOpenedBeforeTheOthersCommitStillWrites() async throws {
        let (fixture, daemon, command, seqs) = try await daemonAndCommand()
        defer { withExtendedLifetime(fixture) {} }
        #expect(await daemon.append((5..<10).map { fix("boat", Int64($0)) }).allSatisfy { $0.seq != nil })
        #expect(try await command.queueReplay(destination: "traccar", seqs: seqs) == 5)
        #expect(await daemon.append((10..<15).map { fix("boat", Int64($0)) }).allSatisfy { $0.seq != nil })
        command.close()
        daemon.close()
    }

    /// A command's writer beside the daemon's: both commit, neither fails on the other's lock.
    @Test func aSecondWriterCoexistsWithTheFirst() async throws {
        let (fixture, daemon, command, seqs) = try await daemonAndCommand()
        defer { withExtendedLifetime(fixture) {} }
        async let appended = daemon.append((5..<500).map { fix("boat", Int64($0)) })
        #expect(try await command.queueReplay(destination: "traccar", seqs: seqs) == 5)
        try await command.clearLog()
        command.close()
        #expect(await appended.allSatisfy { $0.seq != nil })
        #expect(try daemon.makeReader().replayQueue(destination: "traccar", limit: 100).count == 5)
        // The command's writer did none of the daemon's upkeep: the recent positions the daemon's
        // writer keeps in memory are still where it left them.
        #expect(
            try daemon.withWriterConnection { db in
                let count = try db.statement("SELECT count(*) FROM recent")
                _ = try count.step()
                return count.int64(0)
            } == 500)
        daemon.close()
    }
}

import Foundation
import GeoRelayCore
import GeoRelaySpool
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// A box downgraded after a bad upgrade meets a spool from a newer relay. The package's preinst
/// asks the installed relay `check --schema` before it lets an older version in; a relay that
/// meets such a spool anyway (a binary copied by hand, a spool moved between boxes) says what to
/// do and touches nothing, so the newer relay still finds every position.
@Suite(.offThePool) struct SchemaVersionTests {
    @Test func aSpoolFromANewerRelayIsRefusedWithWhatToDoAndKeptWhole() async throws {
        let world = try RelayWorld()
        let (before, newer, refused, after, rerun) = try await offThePool {
            let fresh = try world.command(["check", "--schema"])
            try world.start()
            _ = try writeInBatches(try world.client(), device: "boat", count: 20)
            world.relay?.signal(SIGTERM)
            let before = try world.command(["check", "--schema"])
            #expect(
                fresh.stdout == "0 \(SpoolReader.newestReadableSchema) \(world.spoolPath)\n",
                "before any spool: \(fresh.stdout) \(fresh.stderr)")

            // What a newer relay's migration leaves behind.
            try Self.setUserVersion(SpoolReader.newestReadableSchema + 1, path: world.spoolPath)
            let newer = try world.command(["check", "--schema"])
            let refused = try world.command(["run"])
            let rerun = try world.command(["status"])
            // The newer relay reads the file as it was: put the version back and every position is there.
            try Self.setUserVersion(SpoolReader.newestReadableSchema, path: world.spoolPath)
            let after = try world.statusJSON()
            return (before, newer, refused, after, rerun)
        }
        let readable = SpoolReader.newestReadableSchema
        #expect(
            before.status == 0 && before.stdout == "\(readable) \(readable) \(world.spoolPath)\n",
            "check --schema: \(before.stdout) \(before.stderr)")
        #expect(
            newer.status == 0 && newer.stdout == "\(readable + 1) \(readable) \(world.spoolPath)\n",
            "check --schema on a newer spool: \(newer.stdout) \(newer.stderr)")
        #expect(refused.status != 0, "run on a newer spool exited 0: \(refused.stderr)")
        for part in [
            "spool \(world.spoolPath) has schema \(readable + 1)", "reads schema \(readable) and older",
            "install the newer georelay again",
            "mv \(world.spoolPath) \(world.spoolPath).schema\(readable + 1)",
        ] {
            #expect(refused.stderr.contains(part), "run's message lacks '\(part)': \(refused.stderr)")
        }
        #expect(
            rerun.status != 0 && rerun.stderr.contains("has schema \(readable + 1)"),
            "status on a newer spool: \(rerun.stdout) \(rerun.stderr)")
        #expect(after["spool"]?["rows"]?.number == 20, "the refused runs lost positions: \(after)")
    }

    private static func setUserVersion(_ version: Int, path: String) throws {
        let db = try SQLiteDatabase(path: path)
        try db.execute("PRAGMA user_version = \(version)")
    }
}

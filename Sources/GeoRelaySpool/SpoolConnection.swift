import CSQLite
import FoundationEssentials
import GeoRelayCore
import Glibc

/// Opens spool connections with the settings the durability promise rests on.
enum SpoolConnection {
    /// The page size of spools this relay creates (measured: `georelay-bench --only flash`).
    static let pageSize = 512

    /// The writer: WAL, `synchronous=FULL` (an `ok` survives power loss, not
    /// just a crash), file mode 0600, schema migrated.
    /// - Parameter maxBytes: the quota; the WAL beside the database is kept to an eighth of
    ///   it (between 256 KiB and 16 MiB), so the quota bounds what the spool takes on disk.
    static func openWriter(path: String, maxBytes: Int64 = 1 << 30) throws(SpoolError) -> SQLiteDatabase {
        let directory = Paths.directory(of: path)
        if !directory.isEmpty, !FileManager.default.fileExists(atPath: directory) {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw .incompatible("cannot create spool directory \(directory): \(error)")
            }
        }
        // Create the file with 0600 before SQLite does, so positions are never world-readable.
        try? FileDescriptor.open(path, O_RDWR | O_CREAT, mode: 0o600).close()
        chmod(path, 0o600)
        return try SpoolError.wrapping {
            let db = try SQLiteDatabase(path: path)
            // A new spool gets 512-byte pages: a commit of a few positions rewrites the leaf (or
            // two) of the ring its slots are in, and the fsync writes every 4 KiB block of the WAL
            // that frame touches, so the smaller the frame the fewer blocks (4 KiB pages were most
            // of what wore an SD card; 512 bytes against 1 KiB: BENCHMARKS.md, flash). An existing
            // spool keeps the size it was made with.
            try db.execute("PRAGMA page_size = \(Self.pageSize)")
            let mode = try db.pragma("journal_mode = WAL")
            guard mode?.lowercased() == "wal" else {
                throw SpoolError.incompatible("spool \(path): journal_mode=WAL answered \(mode ?? "nothing")")
            }
            try db.execute("PRAGMA synchronous = FULL")
            guard try db.pragma("synchronous") == "2" else {
                throw SpoolError.incompatible("spool \(path): synchronous=FULL was not accepted")
            }
            // The WAL is checkpointed by walBytes at the latest and truncated back to that size
            // after a burst; the quota counts only the database, so the WAL must stay small beside it.
            let walBytes = min(16 << 20, max(256 << 10, maxBytes / 8))
            try db.execute("PRAGMA journal_size_limit = \(walBytes)")
            // A checkpoint at 4 MiB of WAL (half the limit for small quotas), counted in this
            // spool's pages: each one writes every page changed since the last, so at small pages
            // SQLite's default of 1,000 pages would rewrite the same few (the newest leaves, the
            // delivery state) into the database eight times as often (BENCHMARKS.md, flash).
            let pageSize = Int64(try db.pragma("page_size") ?? "4096") ?? 4096
            try db.execute("PRAGMA wal_autocheckpoint = \(max(64, min(4 << 20, walBytes / 2) / pageSize))")
            try db.execute("PRAGMA foreign_keys = OFF")
            try Schema.migrate(db, path: path)
            for suffix in ["-wal", "-shm"] { chmod(path + suffix, 0o600) }
            return db
        }
    }

    /// A reader for forwarders and `georelay status`: never writes, sees the last commit.
    static func openReader(path: String) throws(SpoolError) -> SQLiteDatabase {
        guard FileManager.default.fileExists(atPath: path) else {
            throw .notFound("no spool at \(path)")
        }
        return try SpoolError.wrapping {
            let db = try SQLiteDatabase(path: path, readOnly: true)
            // Readers scan in order: a small page cache does as well and keeps exports and status small.
            try db.execute("PRAGMA cache_size = -512")
            let version = Int(try db.pragma("user_version") ?? "0") ?? 0
            guard version <= Schema.currentVersion else {
                throw SpoolError.newerSchema(version, path: path)
            }
            guard version == Schema.currentVersion else {
                throw SpoolError.incompatible(
                    "spool \(path) has schema \(version), from an older georelay: `georelay run` brings it to \(Schema.currentVersion)"
                )
            }
            return db
        }
    }
}

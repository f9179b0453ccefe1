/// The spool's schema, versioned with `PRAGMA user_version` from the first release on.
///
/// Each migration moves the schema one version forward inside the writer's
/// transaction; a spool written by a newer relay is refused rather than guessed at.
enum Schema {
    static let migrations: [String] = [
        // Version 1.
        """
        CREATE TABLE devices(
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            last_seq INTEGER NOT NULL DEFAULT 0,
            last_fix_ms INTEGER,
            last_received_ms INTEGER
        );
        -- seq never repeats (AUTOINCREMENT), so a destination's cursor stays meaningful after deletions.
        CREATE TABLE positions(
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            device_id INTEGER NOT NULL,
            fix_ms INTEGER NOT NULL,
            received_ms INTEGER NOT NULL,
            lat REAL NOT NULL,
            lon REAL NOT NULL,
            speed REAL, course REAL, altitude REAL, accuracy REAL, battery REAL,
            charging INTEGER, alarm TEXT, attributes TEXT
        );
        -- Idempotent ingest: one row per device and fix time.
        CREATE UNIQUE INDEX positions_fix ON positions(device_id, fix_ms);
        -- A destination reads each device's positions in seq order (the index holds the rowid).
        CREATE INDEX positions_device ON positions(device_id);
        CREATE TABLE destinations(
            name TEXT PRIMARY KEY,
            start_seq INTEGER NOT NULL,
            buffered INTEGER NOT NULL DEFAULT 1,
            state TEXT NOT NULL DEFAULT 'online',
            last_success_ms INTEGER,
            last_error TEXT,
            next_attempt_ms INTEGER,
            sent INTEGER NOT NULL DEFAULT 0,
            wire_bytes INTEGER NOT NULL DEFAULT 0,
            updated_ms INTEGER
        );
        CREATE TABLE cursors(
            destination TEXT NOT NULL,
            device_id INTEGER NOT NULL,
            acked_seq INTEGER NOT NULL,
            parked_until_ms INTEGER,
            parked_reason TEXT,
            PRIMARY KEY(destination, device_id)
        ) WITHOUT ROWID;
        CREATE TABLE quarantine(
            destination TEXT NOT NULL,
            seq INTEGER NOT NULL,
            time_ms INTEGER NOT NULL,
            reason TEXT NOT NULL,
            PRIMARY KEY(destination, seq)
        ) WITHOUT ROWID;
        CREATE TABLE counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE log(id INTEGER PRIMARY KEY, time_ms INTEGER NOT NULL, level INTEGER NOT NULL, message TEXT NOT NULL);
        """,
        // Version 2: the body encoding a push destination settled on after a 415.
        """
        ALTER TABLE destinations ADD COLUMN encoding TEXT;
        """,
        // Version 3: what each destination last sent for each device (the location filter's
        // memory), and alarms sent ahead of their device's backlog.
        """
        CREATE TABLE filter_state(
            destination TEXT NOT NULL,
            device_id INTEGER NOT NULL,
            last_sent_ms INTEGER, last_sent_lat REAL, last_sent_lon REAL, last_sent_course REAL,
            newest_sent_ms INTEGER, anchor_lat REAL, anchor_lon REAL, anchor_since_ms INTEGER NOT NULL DEFAULT 0,
            stopped INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY(destination, device_id)
        ) WITHOUT ROWID;
        CREATE TABLE alarm_sent(destination TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(destination, seq)) WITHOUT ROWID;
        CREATE INDEX positions_alarm ON positions(seq) WHERE alarm IS NOT NULL;
        """,
        // Version 4: source receivers of a multi-source device, stored but never forwarded as themselves.
        """
        ALTER TABLE devices ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0;
        """,
        // Version 5: positions stored per device, for metrics.
        """
        ALTER TABLE devices ADD COLUMN received INTEGER NOT NULL DEFAULT 0;
        """,
        // Version 6: the uplink budget per day, and each destination's recent send rate.
        """
        CREATE TABLE wire_daily(destination TEXT NOT NULL, day TEXT NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY(destination, day)) WITHOUT ROWID;
        ALTER TABLE destinations ADD COLUMN send_rate REAL;
        ALTER TABLE destinations ADD COLUMN rate_updated_ms INTEGER;
        """,
        // Version 7: positions queued again for a destination (georelay replay), sent as history.
        """
        CREATE TABLE replay_queue(destination TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(destination, seq)) WITHOUT ROWID;
        """,
        // Version 8: new positions land in `recent`, a table without indexes, and move into `positions`
        // in bulk (see `RecentPositions`), so a commit at 1 Hz rewrites one leaf instead of one in each
        // index per device. Same columns as `positions`; seqs in it are above every seq there.
        // `devices.last_seq` and friends describe `positions` only; `device_totals` adds `recent`.
        """
        CREATE TABLE recent(
            seq INTEGER PRIMARY KEY,
            device_id INTEGER NOT NULL,
            fix_ms INTEGER NOT NULL,
            received_ms INTEGER NOT NULL,
            lat REAL NOT NULL,
            lon REAL NOT NULL,
            speed REAL, course REAL, altitude REAL, accuracy REAL, battery REAL,
            charging INTEGER, alarm TEXT, attributes TEXT
        );
        \(deviceTotalsView)
        -- What status counts without scanning the backlog: per cursor, how many of its device's
        -- positions it has passed (acknowledged, quarantined, or dropped by the quota), so that
        -- pending = positions ever stored (device_totals.received) - settled. Every destination
        -- gets a cursor per device that existed when it was added; a device without one started
        -- after it, with nothing settled. `spool.deleted` makes the row count a sum of the same kind.
        ALTER TABLE cursors ADD COLUMN settled INTEGER NOT NULL DEFAULT 0;
        INSERT OR IGNORE INTO cursors(destination, device_id, acked_seq) SELECT dst.name, d.id, dst.start_seq FROM destinations dst CROSS JOIN devices d;
        UPDATE cursors SET settled = (SELECT received FROM devices WHERE id = cursors.device_id)
            - (SELECT count(*) FROM positions p WHERE p.device_id = cursors.device_id AND p.seq > cursors.acked_seq);
        INSERT INTO counters(name, value) VALUES('spool.deleted', coalesce((SELECT sum(received) FROM devices), 0) - (SELECT count(*) FROM positions))
            ON CONFLICT(name) DO UPDATE SET value = excluded.value;
        """,
        // Version 9: the status page's 24-hour chart, one sample of each destination's backlog and
        // wire bytes every few minutes (at most `ChartSample.perDestination` each, see SpoolStore+ChartSamples).
        """
        CREATE TABLE chart_samples(destination TEXT NOT NULL, time_ms INTEGER NOT NULL, pending INTEGER NOT NULL,
                                   wire_bytes INTEGER NOT NULL, PRIMARY KEY(destination, time_ms)) WITHOUT ROWID;
        """,
        // Version 10: wire bytes per uplink and UTC day, for budgets and status; this
        // month and the last are kept (`UplinkUsage.keptDays`, see SpoolStore+UplinkUsage).
        """
        CREATE TABLE uplink_daily(uplink TEXT NOT NULL, day TEXT NOT NULL, bytes INTEGER NOT NULL,
                                  PRIMARY KEY(uplink, day)) WITHOUT ROWID;
        """,
        // Version 11: `recent` becomes a ring of pre-allocated slots updated in place (see
        // `RecentPositions`), so a commit allocates no page. What the table held is merged into
        // `positions` first, as the writer's merge would (nothing is lost, seqs are kept), then the
        // ring starts empty above it; `recent` is now a view of the ring's live slots, with the
        // table's columns, so every reader reads it as before.
        RecentPositions.mergeSQL(from: "recent", columns: version1Columns) + """
            -- The highest seq merged into `positions` (one row): a slot whose seq is at or below it is free.
            CREATE TABLE recent_merged(seq INTEGER NOT NULL);
            INSERT INTO recent_merged VALUES(max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'positions'), 0),
                                                 coalesce((SELECT max(seq) FROM recent), 0)));
            DROP VIEW device_totals;
            DROP TABLE recent;
            CREATE TABLE recent_slots(
                slot INTEGER PRIMARY KEY,
                seq INTEGER NOT NULL,
                device_id INTEGER NOT NULL,
                fix_ms INTEGER NOT NULL,
                received_ms INTEGER NOT NULL,
                lat REAL NOT NULL,
                lon REAL NOT NULL,
                speed REAL, course REAL, altitude REAL, accuracy REAL, battery REAL,
                charging INTEGER, alarm TEXT, attributes TEXT
            );
            -- Free slots hold seq 0 and a placeholder as large as a position, so that writing a position
            -- into one rewrites its leaf in place (`RecentPositions.placeholderBytes`).
            WITH RECURSIVE n(slot) AS (SELECT 0 UNION ALL SELECT slot + 1 FROM n WHERE slot < \(RecentPositions.newSpoolSlots - 1))
            INSERT INTO recent_slots(slot, seq, device_id, fix_ms, received_ms, lat, lon, attributes)
            SELECT slot, 0, 0, 0, 0, 0, 0, zeroblob(\(RecentPositions.placeholderBytes)) FROM n;
            CREATE VIEW recent AS
            SELECT seq, device_id, fix_ms, received_ms, lat, lon, speed, course, altitude, accuracy, battery, charging, alarm, attributes
            FROM recent_slots WHERE seq > (SELECT seq FROM recent_merged);
            \(deviceTotalsView)
            """,
        // Version 12: each position's odometer (`Odometer`: metres along its device's track,
        // whole metres), and per destination and device the odometer of the last position sent
        // and of the newest, from which the `distance` Traccar chains is sent (rows stored before
        // carry none); per destination, the positions delivered behind a newer one of their device.
        """
        ALTER TABLE positions ADD COLUMN odometer REAL;
        ALTER TABLE recent_slots ADD COLUMN odometer REAL;
        DROP VIEW device_totals;
        DROP VIEW recent;
        CREATE VIEW recent AS
        SELECT seq, device_id, \(RecentPositions.rowColumns)
        FROM recent_slots WHERE seq > (SELECT seq FROM recent_merged);
        \(deviceTotalsView)
        ALTER TABLE filter_state ADD COLUMN last_sent_odometer REAL;
        ALTER TABLE filter_state ADD COLUMN newest_sent_odometer REAL;
        ALTER TABLE destinations ADD COLUMN behind_newer INTEGER NOT NULL DEFAULT 0;
        """,
        // Version 13: each watched vessel's GNSS integrity (`IntegrityRecord`): its state, since
        // when, the evidence, and its episodes of jamming or spoofing.
        """
        CREATE TABLE integrity(
            device TEXT PRIMARY KEY,
            state TEXT NOT NULL,
            since_ms INTEGER NOT NULL,
            evidence TEXT NOT NULL,
            episodes INTEGER NOT NULL
        ) WITHOUT ROWID;
        """,
    ]

    /// A position row's columns after `seq, device_id` from version 1 to 11.
    private static let version1Columns =
        "fix_ms, received_ms, lat, lon, speed, course, altitude, accuracy, battery, charging, alarm, attributes"

    /// Each device's totals over `positions` (what `devices` holds) and `recent` (what waits to be merged).
    private static let deviceTotalsView = """
        CREATE VIEW device_totals AS
        SELECT d.id, d.name, d.hidden,
               max(d.last_seq, coalesce(r.seq, 0)) AS last_seq,
               max(coalesce(d.last_fix_ms, r.fix_ms), coalesce(r.fix_ms, d.last_fix_ms)) AS last_fix_ms,
               max(coalesce(d.last_received_ms, r.received_ms), coalesce(r.received_ms, d.last_received_ms)) AS last_received_ms,
               d.received + coalesce(r.n, 0) AS received
        FROM devices d LEFT JOIN (
            SELECT device_id, max(seq) AS seq, max(fix_ms) AS fix_ms, max(received_ms) AS received_ms, count(*) AS n
            FROM recent GROUP BY device_id) r ON r.device_id = d.id;
        """

    static var currentVersion: Int { migrations.count }

    /// Brings the database at `path` to the current version.
    static func migrate(_ db: SQLiteDatabase, path: String) throws(SpoolError) {
        try SpoolError.wrapping {
            let version = Int(try db.pragma("user_version") ?? "0") ?? 0
            if version > currentVersion {
                throw SpoolError.newerSchema(version, path: path)
            }
            guard version < currentVersion else { return }
            try db.transaction {
                for index in version..<currentVersion {
                    try db.execute(migrations[index])
                }
                try db.execute("PRAGMA user_version = \(currentVersion)")
            }
        }
    }

    /// What a relay that meets a spool from a newer one says: usually a box downgraded after a bad
    /// upgrade (the package's preinst refuses that, but a binary copied by hand or a spool moved
    /// between boxes gets here). It names the two ways on and that nothing is lost by either: the
    /// newer relay reads the file as it is, and a spool moved aside keeps its positions for it.
    static func newerSpool(path: String, version: Int) -> String {
        """
        spool \(path) has schema \(version), written by a newer georelay; this one reads schema \(currentVersion) and older. \
        Nothing in it is lost: install the newer georelay again and it delivers what is pending; or, to run this one now \
        on an empty spool, stop the relay and move the spool aside, keeping it for the newer relay: \
        mv \(path) \(path).schema\(version) (and if \(path)-wal is there: mv \(path)-wal \(path).schema\(version)-wal)
        """
    }
}

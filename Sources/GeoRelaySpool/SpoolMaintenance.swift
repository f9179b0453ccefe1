import GeoRelayCore

/// The spool's upkeep over the writer's store: retention, the quota, trimming the diagnostic
/// log, and merging the ring of recent positions at close. The SQL of retention and the quota
/// is `Eviction`'s; this decides when they run and what is said about them.
///
/// A value made for each use on the writer's queue, like the store it works on.
struct SpoolMaintenance {
    let store: SpoolStore

    private var logger: Logger { store.logger }
    private var settings: Spool.Settings { store.settings }

    /// The idle pass on the maintenance timer: retention, the log, the quota with nothing incoming.
    func run() {
        do {
            let deleted = try deleteExpired(nowMs: settings.clock.nowMs())
            if deleted > 0 { logger.debug("retention deleted \(deleted) delivered positions") }
        } catch {
            logger.warning("retention pass failed: \(error)")
        }
        store.trimLog()
        enforceQuota(incoming: 0)
    }

    /// Deletes delivered positions past their retention, in a transaction of its own.
    func deleteExpired(nowMs: Int64) throws -> Int {
        do {
            return try store.db.transaction {
                try Eviction(db: store.db, settings: settings).deleteExpired(nowMs: nowMs) { try store.mergeRecent() }
            }
        } catch {
            store.reloadRecent()
            throw error
        }
    }

    /// Makes room for `incoming` positions under the quota, dropping the oldest undelivered
    /// ones (`whenFull: dropOldest`) or turning new positions away (`reject`) when it must.
    func enforceQuota(incoming: Int) {
        let db = store.db
        do {
            let outcome = try Eviction(db: db, settings: settings).enforceQuota(
                incomingBytes: Int64(incoming) * Eviction.bytesPerPosition
            ) {
                try store.mergeRecent()
            }
            if outcome.dropped > 0 {
                logger.warning(
                    "spool at its quota of \(settings.maxBytes) bytes: dropped the \(outcome.dropped) oldest undelivered positions"
                )
                try? db.execute(
                    "INSERT INTO counters VALUES('spool.dropped', \(outcome.dropped)) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value"
                )
            }
            if outcome.full != store.rejectingNew {
                store.rejectingNew = outcome.full
                if outcome.full {
                    logger.error(
                        "spool at its quota of \(settings.maxBytes) bytes with nothing delivered to drop: rejecting new positions"
                    )
                } else {
                    logger.notice("spool below its quota again: accepting new positions")
                }
            }
        } catch {
            logger.error("quota check failed: \(error)")
            store.reloadRecent()
        }
    }

    /// Trims the log once enough rows have come in since the last trim.
    func trimLogIfDue() {
        if store.logRowsSinceTrim > SpoolStore.logCapacity / 10 { store.trimLog() }
    }

    /// On the way out: the ring merged, so the next start (or an offline command) finds `recent`
    /// empty, and the WAL checkpointed into the database.
    func close() {
        guard settings.upkeep else { return }
        do {
            try store.db.transaction { try store.mergeRecent() }
        } catch {
            logger.warning("merging recent positions at close failed (they stay in recent): \(error)")
        }
        _ = try? store.db.pragma("wal_checkpoint(TRUNCATE)")
    }
}

import GeoRelayCore

/// NMEA sentences: fix cycles assembled per connection, their lines answered together.
extension IngestLoop {
    /// One NMEA sentence through the connection's fix-cycle assembler: the line's
    /// answer waits while its cycle is incomplete, then every line of the cycle
    /// gets the position's `ok`.
    func feed(_ sentence: NMEASentence, connection: IngestConnection, nowMs: Int64) {
        guard let device = connection.device else {
            reject(.device("NMEA sentences need a hello with a device first"), connection: connection)
            return
        }
        for action in connection.nmea.feed(sentence, device: device) {
            switch action {
            case .flush(let position):
                emitCycle(position, connection: connection, extra: nil, nowMs: nowMs)
            case .hold:
                if connection.acks { connection.nmeaHeld.append(connection.addSlot(nil)) }
                connection.nmeaHeldSinceMs = connection.nmeaHeldSinceMs ?? WallClock.monotonicMs()
            case .complete(let position):
                emitCycle(position, connection: connection, extra: connection.acks ? connection.addSlot(nil) : nil, nowMs: nowMs)
            case .skip(let reason):
                if connection.acks { _ = connection.addSlot("skip \(reason)") }
            }
        }
    }

    /// Stores a finished fix cycle, answering its held lines (and `extra`, the line that completed it).
    private func emitCycle(_ position: Position, connection: IngestConnection, extra: UInt64?, nowMs: Int64) {
        var slots = connection.nmeaHeld
        if let extra { slots.append(extra) }
        connection.nmeaHeld.removeAll()
        connection.nmeaHeldSinceMs = nil
        do throws(IngestError) {
            try decoder.validate(position, nowMs: nowMs)
            enqueue(position, connection: connection, slots: slots)
        } catch {
            rejected["ingest.rejected.\(error.code)", default: 0] += 1
            for slot in slots { connection.resolve(slot, "err \(error.code) \(error.message)") }
        }
    }

    /// Ends fix cycles nobody completed: the connection closed, or the receiver went quiet.
    func flushNMEA(_ connection: IngestConnection, nowMs: Int64) {
        guard let device = connection.device, connection.nmea.hasPending || !connection.nmeaHeld.isEmpty else { return }
        if let position = connection.nmea.flush(device: device) {
            emitCycle(position, connection: connection, extra: nil, nowMs: nowMs)
        } else {
            for slot in connection.nmeaHeld { connection.resolve(slot, "skip no-fix") }
            connection.nmeaHeld.removeAll()
            connection.nmeaHeldSinceMs = nil
        }
    }

}

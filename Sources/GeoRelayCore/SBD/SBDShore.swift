/// What the shore relay makes of a modem's message: the vessel its IMEI names, and its fixes as
/// that vessel's devices' positions, with the ids the relay aboard forwards them under over IP
/// (so Traccar files both under one device, and the spool stores a fix once whichever way it came).
package enum SBDShore {
    /// A vessel the shore relay takes messages from (`ingest.sbd.vessels`).
    package struct Vessel: Sendable, Equatable {
        /// The modem's IMEI: 15 digits, as DirectIP and RockBLOCK carry it.
        package var imei: String
        /// The device ids aboard, in the order the relay aboard numbers them (its `sbd.units`).
        package var units: [String]
        /// The relay aboard's `sbd.relayId`; nil: any.
        package var relayID: UInt32?

        package init(imei: String, units: [String], relayID: UInt32? = nil) {
            self.imei = imei
            self.units = units
            self.relayID = relayID
        }
    }

    /// A message's positions, and whose.
    package struct Delivery: Sendable, Equatable {
        package var imei: String
        package var sequence: UInt32
        package var positions: [Position]
    }

    /// The positions in `payload` from the modem `imei`.
    /// - Throws: an IMEI no vessel has, a payload that is not a message of ours, a vessel whose
    ///   unit list differs from this relay's, a unit beyond it: nothing of the message is stored.
    package static func delivery(imei: String, payload: [UInt8], vessels: [Vessel]) throws(SBDMessageError) -> Delivery
    {
        guard let vessel = vessels.first(where: { $0.imei == imei }) else {
            throw SBDMessageError("IMEI \(imei) is not a vessel in ingest.sbd.vessels")
        }
        let message = try SBDMessage.decode(payload)
        let roster = SBDMessage.rosterCheck(vessel.units)
        guard message.roster == roster else {
            throw SBDMessageError(
                "IMEI \(imei): the vessel numbers its units from another list than ingest.sbd.vessels has (roster check \(message.roster), here \(roster)): make both lists the same, in the same order"
            )
        }
        if let relayID = vessel.relayID, relayID != message.relayID {
            throw SBDMessageError(
                "IMEI \(imei): relay id \(message.relayID), where ingest.sbd.vessels expects \(relayID)")
        }
        var positions: [Position] = []
        for (index, fix) in message.fixes.enumerated() {
            guard vessel.units.indices.contains(fix.unit) else {
                throw SBDMessageError(
                    "IMEI \(imei): fix \(index) is of unit \(fix.unit); the vessel has \(vessel.units.count)")
            }
            positions.append(
                Position(
                    device: vessel.units[fix.unit], timeMs: fix.timeSeconds * 1000, lat: fix.lat, lon: fix.lon,
                    speed: fix.speedKnots.map { $0 * 1852 / 3600 }, course: fix.course, alarm: fix.alarm))
        }
        return Delivery(imei: imei, sequence: message.sequence, positions: positions)
    }
}

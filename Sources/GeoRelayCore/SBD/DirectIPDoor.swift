/// What the shore relay does with one DirectIP connection's message, without I/O: the positions
/// to store, whether to confirm it as taken, and what to say in the log.
package enum DirectIPDoor {
    package struct Outcome: Sendable, Equatable {
        /// To store; the message is taken once they are durable.
        package var positions: [Position]
        /// Taken as it is (a mailbox check, a failed session: nothing to store), or refused.
        package var accepted: Bool
        /// For the log: what came and from whom, or why it was refused (never a payload's bytes).
        package var note: String
    }

    package static func outcome(_ bytes: [UInt8], vessels: [SBDShore.Vessel]) -> Outcome {
        let message: DirectIPMessage
        do {
            message = try DirectIPMessage.decode(bytes)
        } catch {
            return Outcome(positions: [], accepted: false, note: "refused a DirectIP message: \(error.message)")
        }
        guard let payload = message.payload else {
            let what = message.sessionSucceeded ? "a session without a message (a mailbox check)" : "a failed session"
            return Outcome(
                positions: [], accepted: true,
                note: "IMEI \(message.imei): \(what), status \(message.sessionStatus), MOMSN \(message.momsn)")
        }
        do {
            let delivery = try SBDShore.delivery(imei: message.imei, payload: payload, vessels: vessels)
            return Outcome(
                positions: delivery.positions, accepted: true,
                note:
                    "IMEI \(message.imei): message \(delivery.sequence) (MOMSN \(message.momsn)), \(delivery.positions.count) positions"
            )
        } catch {
            return Outcome(positions: [], accepted: false, note: "refused a DirectIP message: \(error.message)")
        }
    }
}

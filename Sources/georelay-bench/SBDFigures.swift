import GeoRelayCore
import GeoRelayForward

/// The `sbd` figure: what a day of Iridium SBD costs a 4-unit vessel with every IP link down,
/// the relay's planner and message against one position a message (what Traccar's Iridium
/// decoders take), on the realistic day's track, each unit a few metres from the next.
func sbdFigure() throws {
    let roster = ["gps-bow", "gps-stern", "ais", "mob"]
    let startMs: Int64 = 1_784_937_600_000 // 2026-07-25T00:00:00Z
    let track = realisticDay(startMs: startMs)
    var settings = SBDPlanner.Settings()
    settings.roster = roster
    var planner = SBDPlanner(settings: settings)
    let origin = RelayInstant.origin
    var messages = 0
    var credits = 0
    var bytes = 0
    var positions = 0
    // A look a minute, a day long; IP never delivers.
    for minute in 0..<(24 * 60) {
        let second = minute * 60
        let fix = track[min(second, track.count - 1)]
        let newest = Dictionary(
            uniqueKeysWithValues: roster.enumerated().map { index, device in
                var position = fix
                position.device = device
                position.lat += Double(index) * 0.00003
                position.lon += Double(index) * 0.00002
                return (device, position)
            })
        let now = origin + .seconds(second)
        let look = SBDPlanner.Look(
            now: now, wallMs: startMs + Int64(second) * 1000, ipDeliveredAt: nil, startedAt: origin, newest: newest,
            alarms: [], service: true)
        guard case .send(let message, let cost, _) = planner.decide(look) else { continue }
        let encoded = try message.encode()
        messages += 1
        credits += cost
        bytes += encoded.count
        positions += message.fixes.count
        planner.ended(.sent, now: now, wallMs: startMs + Int64(second) * 1000)
    }
    let alarm = try SBDMessage(
        relayID: 0, sequence: 1, roster: SBDMessage.rosterCheck(roster),
        fixes: [.init(unit: 3, timeSeconds: startMs / 1000, lat: 59.9, lon: 10.7, speedKnots: 0, alarm: "sos")]
    ).encode()
    emit(
        "sbd_day_four_units",
        [
            ("messages", .number(Double(messages))), ("credits", .number(Double(credits))),
            ("positions", .number(Double(positions))),
            ("bytes_per_position", .number((Double(bytes) / Double(max(positions, 1)) * 100).rounded() / 100)),
            ("bytes_per_message", .number((Double(bytes) / Double(max(messages, 1)) * 10).rounded() / 10)),
            ("alarm_message_bytes", .number(Double(alarm.count))),
            ("one_position_a_message_credits", .number(Double(positions))),
            ("target", .string("<= 10 bytes a position; 4 units' positions in one credit")),
        ])
}

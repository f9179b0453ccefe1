import Foundation
import GeoRelayCore

/// A voyage drawn from one seed: four GPS units and a phone, passages and moorings, alarms, the
/// uplinks' outages (minutes to days), the relay's restarts and crashes and steps of its wall clock.
///
/// Rates: underway each unit fixes every 60 s, moored every 600 s; the phone every 300 s; and
/// one unit at 1 Hz for ten minutes a day (a manoeuvre), so the drain after an outage carries
/// bursts as well as the steady trickle. About 6,600 fixes a day underway, 1,700 moored. Underway
/// the relay's traffic takes the satellite (metered, with a day and a month budget), moored the
/// marina's Wi-Fi; the route moves at midnight. Unit 2 raises an alarm every three days on average.
struct Voyage {
    static let units = ["unit-1", "unit-2", "unit-3", "unit-4"]
    static let phone = "phone"
    static let dayMs: Int64 = 86_400_000
    /// 2026-01-01T00:00:00Z.
    static let startMs: Int64 = 1_767_225_600_000

    /// An outage of the uplink, in wall time.
    struct Outage {
        var fromMs: Int64
        var untilMs: Int64
    }

    struct Day {
        var underway: Bool
        /// When the 1 Hz manoeuvre begins, ms after midnight.
        var manoeuvreAtMs: Int64
    }

    let days: [Day]
    let outages: [Outage]
    /// When the relay stops and starts again, every four days on average: a clean stop (an
    /// update, a reboot) or, one time in three, a crash (the power cut, the process killed):
    /// what the spool had not committed is gone.
    let restarts: [(atMs: Int64, crash: Bool)]
    /// When unit 2 raised an alarm (`sos`), at whole seconds off its minute grid.
    let alarms: [Int64]
    /// When the Traccar server is restored from a backup, and how old the backup is: every
    /// fifteen days on average, 6 to 72 hours old. The crew then runs `georelay replay --since`
    /// the backup's time.
    let restores: [(atMs: Int64, backMs: Int64)]
    /// The push gateway's maintenance windows (every push answered 503): every ten days on
    /// average, an hour to six.
    let maintenance: [Outage]
    /// The Traccar server's (every request answered 503), drawn the same way.
    let traccarMaintenance: [Outage]
    static let alarmUnit = "unit-2"
    /// When the box's wall clock is stepped, and by how much: every ten days on average it goes
    /// wrong by a minute to six hours either way (a cold start without a battery-backed clock, an
    /// operator), and is stepped right again ten minutes to twelve hours later. The GPS units'
    /// fix times stay right.
    let clockSteps: [(atMs: Int64, byMs: Int64)]
    private let heading: [Double]

    init(days count: Int, seed: UInt64) {
        var random = SimulatedRandom(seed: seed)
        days = (0..<count).map { _ in
            Day(
                underway: Double.random(in: 0..<1, using: &random) < 0.6,
                manoeuvreAtMs: Int64.random(in: 0..<(Self.dayMs - 600_000), using: &random))
        }
        var outages: [Outage] = []
        var at = Self.startMs
        let end = Self.startMs + Int64(count) * Self.dayMs
        while true {
            // One every day and a half on average; each from five minutes to two days.
            let gap = -log(max(1e-9, Double.random(in: 0..<1, using: &random))) * 129_600
            let length = random.logUniformSeconds(300, 172_800)
            let from = at + Int64(gap * 1000)
            guard from < end else { break }
            let until = from + Int64(length * 1000)
            outages.append(Outage(fromMs: from, untilMs: until))
            at = until
        }
        self.outages = outages
        var restarts: [(atMs: Int64, crash: Bool)] = []
        at = Self.startMs
        while true {
            at += Int64(-log(max(1e-9, Double.random(in: 0..<1, using: &random))) * 4 * 86_400_000)
            guard at < end else { break }
            restarts.append((at, Double.random(in: 0..<1, using: &random) < 1.0 / 3))
        }
        self.restarts = restarts
        var clockSteps: [(atMs: Int64, byMs: Int64)] = []
        at = Self.startMs
        while true {
            at += Int64(-log(max(1e-9, Double.random(in: 0..<1, using: &random))) * 10 * 86_400_000)
            guard at < end else { break }
            let size = Int64(random.logUniformSeconds(60, 21_600) * 1000)
            let by = Bool.random(using: &random) ? size : -size
            // Wrong for ten minutes to twelve hours (a box without a battery-backed clock after a
            // cold start, until NTP or the GPS sets it), then stepped right again.
            let wrongFor = Int64(random.logUniformSeconds(600, 43_200) * 1000)
            clockSteps += [(at, by), (at + wrongFor, -by)]
            at += wrongFor
        }
        self.clockSteps = clockSteps
        var alarms: [Int64] = []
        at = Self.startMs
        while true {
            at += Int64(-log(max(1e-9, Double.random(in: 0..<1, using: &random))) * 3 * 86_400_000) / 1000 * 1000
            guard at < end else { break }
            if at % 60_000 == 0 { at += 7_000 }
            alarms.append(at)
        }
        self.alarms = alarms
        func windows() -> [Outage] {
            var windows: [Outage] = []
            var at = Self.startMs
            while true {
                at += Int64(-log(max(1e-9, Double.random(in: 0..<1, using: &random))) * 10 * 86_400_000)
                guard at < end else { break }
                let length = Int64(random.logUniformSeconds(3_600, 21_600) * 1000)
                windows.append(Outage(fromMs: at, untilMs: at + length))
                at += length
            }
            return windows
        }
        maintenance = windows()
        var restores: [(atMs: Int64, backMs: Int64)] = []
        at = Self.startMs
        while true {
            at += Int64(-log(max(1e-9, Double.random(in: 0..<1, using: &random))) * 15 * 86_400_000)
            guard at < end else { break }
            restores.append((at, Int64(random.logUniformSeconds(21_600, 259_200) * 1000)))
        }
        self.restores = restores
        traccarMaintenance = windows()
        heading = (0..<(Self.units.count + 1)).map { _ in Double.random(in: 0..<360, using: &random) }
    }

    /// The uplink the relay's traffic takes at `ms`: the satellite underway, the marina's Wi-Fi moored.
    func underway(atMs ms: Int64) -> Bool {
        days[max(0, min(days.count - 1, Int((ms - Self.startMs) / Self.dayMs)))].underway
    }

    /// Whether the push gateway answers every push 503 at `ms`.
    func gatewayUnavailable(atMs ms: Int64) -> Bool {
        maintenance.contains { $0.fromMs <= ms && ms < $0.untilMs }
    }

    /// Whether the Traccar server answers every request 503 at `ms`.
    func traccarUnavailable(atMs ms: Int64) -> Bool {
        traccarMaintenance.contains { $0.fromMs <= ms && ms < $0.untilMs }
    }

    /// Whether the uplink is up at `ms`.
    func linkUp(atMs ms: Int64) -> Bool {
        !outages.contains { $0.fromMs <= ms && ms < $0.untilMs }
    }

    /// The fixes every device took in `fromMs..<untilMs`, in time order per device.
    func fixes(fromMs: Int64, untilMs: Int64) -> [Position] {
        var positions: [Position] = []
        for (index, device) in (Self.units + [Self.phone]).enumerated() {
            var times = Set<Int64>()
            var dayStart = Self.startMs + (fromMs - Self.startMs) / Self.dayMs * Self.dayMs
            while dayStart < untilMs {
                let day = days[min(days.count - 1, Int((dayStart - Self.startMs) / Self.dayMs))]
                let every: Int64 = device == Self.phone ? 300_000 : day.underway ? 60_000 : 600_000
                let (low, high) = (max(fromMs, dayStart), min(untilMs, dayStart + Self.dayMs))
                var ms = (low + every - 1) / every * every
                while ms < high {
                    times.insert(ms)
                    ms += every
                }
                if device == Self.alarmUnit {
                    for alarm in alarms where low <= alarm && alarm < high { times.insert(alarm) }
                }
                if index == 0 {
                    let begin = dayStart + day.manoeuvreAtMs / 1_000 * 1_000
                    var ms = max(low, begin) + (1_000 - max(low, begin) % 1_000) % 1_000
                    while ms < min(high, begin + 600_000) {
                        times.insert(ms)
                        ms += 1_000
                    }
                }
                dayStart += Self.dayMs
            }
            for ms in times.sorted() {
                let day = days[min(days.count - 1, Int((ms - Self.startMs) / Self.dayMs))]
                var fix = position(device, index: index, atMs: ms, underway: day.underway)
                if device == Self.alarmUnit, ms % 60_000 != 0, alarms.contains(ms) { fix.alarm = "sos" }
                positions.append(fix)
            }
        }
        return positions
    }

    /// Where a device is at `ms`: a straight course at 6 knots underway, a few metres of swing
    /// at anchor; always a valid fix.
    private func position(_ device: String, index: Int, atMs ms: Int64, underway: Bool) -> Position {
        let hours = Double(ms - Self.startMs) / 3_600_000
        let course = heading[index] * .pi / 180
        let nm = underway ? hours * 6 : hours * 0.001
        let lat = max(-80, min(80, 43 + (nm / 60) * cos(course).truncatingRemainder(dividingBy: 1)))
        var lon = 7 + (nm / 60) * sin(course)
        lon = (lon + 180).truncatingRemainder(dividingBy: 360)
        if lon < 0 { lon += 360 }
        return Position(
            device: device, timeMs: ms, lat: lat, lon: lon - 180, speed: underway ? 6 : 0,
            course: heading[index], accuracy: 5)
    }
}

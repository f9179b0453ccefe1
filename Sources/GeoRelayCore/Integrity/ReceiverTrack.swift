/// What the watch remembers of one receiver, and the checks one receiver's samples make alone:
/// a jump, its clock against the relay's, its velocity against its track, its sky.
struct ReceiverTrack {
    var lastFix: GNSSSample.Fix?
    var lastSampleAtMs: Int64 = 0
    /// The fixes of the last `velocityWindowMs`, for the velocity check.
    private var recent: [GNSSSample.Fix] = []
    /// The receiver's clock less the relay's monotonic clock, at its last fix.
    private var clockOffsetMs: Int64?
    /// The usual mean C/N0 and count of satellites heard, learned while the sky is whole.
    private var usualCN0: Double?
    private var usualHeard: Double?
    private var skySamples = 0
    private var hadFix = false
    var lastUnderWayAtMs: Int64?

    static let velocityWindowMs: Int64 = 10_000
    /// Receiver clocks move against the relay's by the serial line's and the collector's delays:
    /// a step is more than that.
    static let clockStepMs: Int64 = 5_000
    /// A receiver silent this long starts its clock's comparison afresh: a collector that comes
    /// back after an outage of its own sends its buffered fixes, older than the relay's now.
    static let clockBaselineSilenceMs: Int64 = 10_000
    /// What two fixes may differ by beyond `maxSpeed`: the receivers' own noise.
    static let jumpSlackMetres = 50.0
    /// How long after the last sign of way the vessel still counts as under way.
    static let underWayMemoryMs: Int64 = 60_000

    func underWay(atMs: Int64) -> Bool { lastUnderWayAtMs.map { atMs - $0 <= Self.underWayMemoryMs } ?? false }

    /// Whether the fix was lost, or the sky collapsed, while the vessel was under way: it stays
    /// evidence for as long as it lasts (a vessel does not stop because nobody can see it move).
    private var lostUnderWay = false
    private var collapsedUnderWay = false

    /// Takes one sample; what it shows of this receiver alone.
    /// - Parameter underWay: whether the vessel is under way, by any of its receivers.
    mutating func take(_ sample: GNSSSample, underWay: Bool, settings: IntegritySettings) -> [IntegrityEvidence] {
        var found: [IntegrityEvidence] = []
        let source = sample.source
        if sample.atMs - lastSampleAtMs > Self.clockBaselineSilenceMs { clockOffsetMs = nil }
        lastSampleAtMs = sample.atMs
        if let fix = sample.fix {
            if let last = lastFix {
                let metres = Geo.distance(lat1: last.lat, lon1: last.lon, lat2: fix.lat, lon2: fix.lon)
                // The receiver's own times space its fixes; where they do not move on, the relay's.
                let seconds = max(1, Double(fix.timeMs - last.timeMs) / 1000)
                if metres > settings.maxSpeed * seconds + Self.jumpSlackMetres {
                    found.append(
                        IntegrityEvidence(
                            kind: .jump, sources: [source],
                            detail: "\(Self.metres(metres)) in \(Self.seconds(seconds))"))
                }
            }
            let offset = fix.timeMs - sample.atMs
            if let clockOffsetMs,
                Self.clockStepped(by: offset - clockOffsetMs, fixMs: fix.timeMs, wallMs: sample.wallMs)
            {
                found.append(
                    IntegrityEvidence(
                        kind: .clockStep, sources: [source],
                        detail: "stepped \(Self.seconds(Double(offset - clockOffsetMs) / 1000, signed: true))"))
            }
            clockOffsetMs = offset
            recent.append(fix)
            recent.removeAll { fix.timeMs - $0.timeMs > Self.velocityWindowMs || $0.timeMs > fix.timeMs }
            if let velocity = velocityMismatch(source: source, settings: settings) { found.append(velocity) }
            if let speed = fix.speed ?? impliedSpeed(), speed >= settings.underWaySpeed {
                lastUnderWayAtMs = sample.atMs
            }
            lastFix = fix
            hadFix = true
            lostUnderWay = false
        } else if hadFix {
            lostUnderWay = lostUnderWay || underWay
            if lostUnderWay {
                found.append(IntegrityEvidence(kind: .fixLost, sources: [source], detail: "no fix, under way"))
            }
        }
        if let sky = sample.sky { found += look(at: sky, source: source, underWay: underWay) }
        return found
    }

    /// Whether a receiver clock that moved `step` against the relay's since its last fix shows a
    /// step: back (a replay of what it said before), or ahead past the relay's wall clock. A
    /// clock that moves ahead but stays behind the wall clock is history catching up (a
    /// collector's buffer sent at once), not a spoofer's.
    static func clockStepped(by step: Int64, fixMs: Int64, wallMs: Int64?) -> Bool {
        if step < -clockStepMs { return true }
        guard step > clockStepMs else { return false }
        return wallMs.map { fixMs > $0.saturatingPlus(clockStepMs) } ?? true
    }

    /// Speed over the window's fixes, m/s, when they span most of it.
    private func impliedSpeed() -> Double? {
        guard let first = recent.first, let last = recent.last, last.timeMs - first.timeMs >= Self.velocityWindowMs / 2
        else { return nil }
        let metres = Geo.distance(lat1: first.lat, lon1: first.lon, lat2: last.lat, lon2: last.lon)
        return metres / (Double(last.timeMs - first.timeMs) / 1000)
    }

    /// Reported speed over ground against the track's, over the window: a receiver pulled off its
    /// track by positions alone still reports the vessel's velocity.
    /// Under way only: a receiver at rest that wanders (a poor sky, a window sill) is no sign.
    private func velocityMismatch(source: String, settings: IntegritySettings) -> IntegrityEvidence? {
        guard let implied = impliedSpeed() else { return nil }
        var sum = 0.0
        for fix in recent {
            guard let speed = fix.speed else { return nil }
            sum += speed
        }
        let mean = sum / Double(recent.count)
        guard mean >= settings.underWaySpeed, abs(implied - mean) > max(2.5, 0.4 * max(mean, implied)) else {
            return nil
        }
        return IntegrityEvidence(
            kind: .velocity, sources: [source],
            detail: "reports \(Self.speed(mean)), its fixes make \(Self.speed(implied))")
    }

    /// The sky against its usual: its C/N0 over every satellite in view (one not heard counts
    /// 0) halved, or almost nothing heard, is a collapse (from under way); many satellites within a
    /// decibel of one another are one transmitter's.
    private mutating func look(at sky: GNSSSample.Sky, source: String, underWay: Bool) -> [IntegrityEvidence] {
        var found: [IntegrityEvidence] = []
        let mean = sky.cn0.reduce(0, +) / Double(max(sky.inView, sky.cn0.count, 1))
        let heard = Double(sky.cn0.count)
        var collapsed = false
        if skySamples >= 10, let usualCN0, let usualHeard, usualCN0 >= 15,
            mean < usualCN0 / 2 || (usualHeard >= 6 && heard < 4)
        {
            collapsed = true
            collapsedUnderWay = collapsedUnderWay || underWay
            if collapsedUnderWay {
                found.append(
                    IntegrityEvidence(
                        kind: .signalCollapse, sources: [source],
                        detail:
                            "C/N0 \(Self.decibels(usualCN0)) to \(Self.decibels(mean)), \(Int(usualHeard.rounded())) satellites heard to \(sky.cn0.count)"
                    ))
            }
        }
        if !collapsed { collapsedUnderWay = false }
        if sky.cn0.count >= 8, let spread = sky.spreadCN0, spread < 1, let heardMean = sky.meanCN0, heardMean >= 30 {
            found.append(
                IntegrityEvidence(
                    kind: .uniformSignal, sources: [source],
                    detail: "\(sky.cn0.count) satellites at \(Self.decibels(heardMean)) within \(Self.decibels(spread))"
                ))
        }
        if !collapsed, heard > 0 {
            skySamples += 1
            let weight = 1 / Double(min(skySamples, 30))
            usualCN0 = (usualCN0 ?? mean) * (1 - weight) + mean * weight
            usualHeard = (usualHeard ?? heard) * (1 - weight) + heard * weight
        }
        return found
    }

    static func metres(_ value: Double) -> String {
        value >= 1000 ? "\((value / 100).rounded() / 10) km" : "\(Int(value.rounded())) m"
    }

    static func seconds(_ value: Double, signed: Bool = false) -> String {
        let text = "\((value * 10).rounded() / 10) s"
        return signed && value >= 0 ? "+" + text : text
    }

    static func speed(_ value: Double) -> String { "\((value * 10).rounded() / 10) m/s" }
    static func decibels(_ value: Double) -> String { "\((value * 10).rounded() / 10) dB-Hz" }
}

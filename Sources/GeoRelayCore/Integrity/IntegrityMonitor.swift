/// One vessel's receivers, judged together (after Spravil et al., 2023: checks from NMEA alone,
/// each weak alone and strong together): each receiver against itself (`ReceiverTrack`), every
/// pair against their antennas' separation, and the vessel's state with the evidence that set it.
///
/// A state is entered once its evidence has held `enterSeconds` and left once all has been clear
/// `clearSeconds`; an episode runs from leaving `ok` to coming back. No I/O and no clock of its
/// own: the samples carry the relay's monotonic time, and `tick` moves it when none come.
package struct IntegrityMonitor: Sendable {
    package let settings: IntegritySettings
    private var receivers: [String: ReceiverTrack] = [:]
    private var pairs: [String: PairBaseline] = [:]
    /// The evidence seen, by kind and receivers, with when it lapses.
    private var evidence: [String: (evidence: IntegrityEvidence, untilMs: Int64)] = [:]
    package private(set) var state: IntegrityState = .ok
    /// Since when what is seen has been worse than `state`, not yet for long enough.
    private var risingSinceMs: Int64?
    /// Since when what is seen has been better than `state`.
    private var clearSinceMs: Int64?
    private var alarmed = false
    /// Per pair of receivers standing apart (`a|b`), the one to blame.
    private var blamed: [String: String] = [:]
    package private(set) var episodeBeganMs: Int64?

    /// A change of the vessel's state, and whether it is the episode's alarm (its first entry
    /// into `jammed` or `spoofed`).
    package struct Transition: Sendable, Equatable {
        package var from: IntegrityState
        package var to: IntegrityState
        package var evidence: [IntegrityEvidence]
        package var alarm: Bool
    }

    /// Evidence of an event (a jump, a clock step) stands this long; of a condition, until the
    /// receiver's next samples stop showing it.
    static let eventHoldMs: Int64 = 30_000
    static let conditionHoldMs: Int64 = 2_500
    /// Receivers that reported within this are the vessel's present ones (for `jammed`: all of them).
    static let presentMs: Int64 = 5_000

    package init(settings: IntegritySettings = IntegritySettings()) {
        self.settings = settings
    }

    /// The evidence standing now.
    package func standing(atMs: Int64) -> [IntegrityEvidence] {
        evidence.values.filter { $0.untilMs >= atMs }.map(\.evidence).sorted { $0.description < $1.description }
    }

    /// Receivers the standing evidence names: failover prefers any other. A receiver's own
    /// evidence (spoofing kinds, or any once the vessel is not `ok`) names it; two receivers
    /// apart name the one that had evidence of its own while they were (a jump outlives its
    /// evidence, the separation does not), else the one apart from the most others (of two with
    /// nothing else, both).
    package func suspects(atMs: Int64) -> Set<String> {
        if evidence.isEmpty { return [] }
        let standing = standing(atMs: atMs)
        let own = ownEvidence(standing)
        var strays: [String: Int] = [:]
        var suspects = own
        for pair in standing where pair.kind == .separation && own.isDisjoint(with: pair.sources) {
            if let culprit = blamed[pair.sources.joined(separator: "|")] {
                suspects.insert(culprit)
            } else {
                for source in pair.sources { strays[source, default: 0] += 1 }
            }
        }
        let most = strays.values.max() ?? 0
        return suspects.union(strays.filter { $0.value == most }.keys)
    }

    private func ownEvidence(_ standing: [IntegrityEvidence]) -> Set<String> {
        Set(standing.filter { $0.kind != .separation && (state != .ok || $0.implies > .degraded) }.flatMap(\.sources))
    }

    /// Keeps, for each pair of receivers standing apart, the one that showed evidence of its own.
    private mutating func blame(atMs: Int64) {
        let standing = standing(atMs: atMs)
        let own = ownEvidence(standing)
        var kept: [String: String] = [:]
        for pair in standing where pair.kind == .separation {
            let key = pair.sources.joined(separator: "|")
            let culprits = pair.sources.filter(own.contains)
            kept[key] = culprits.count == 1 ? culprits[0] : blamed[key]
        }
        blamed = kept
    }

    /// Takes one receiver's cycle.
    package mutating func observe(_ sample: GNSSSample) -> Transition? {
        let underWay = receivers.values.contains { $0.underWay(atMs: sample.atMs) }
        var found = receivers[sample.source, default: ReceiverTrack()].take(
            sample, underWay: underWay, settings: settings)
        if let fix = sample.fix { found += comparePairs(sample.source, fix: fix, atMs: sample.atMs) }
        for item in found {
            let hold = item.kind == .jump || item.kind == .clockStep ? Self.eventHoldMs : Self.conditionHoldMs
            evidence[item.kind.rawValue + "|" + item.sources.joined(separator: "|")] = (item, sample.atMs + hold)
        }
        return tick(atMs: sample.atMs)
    }

    /// Moves the vessel's state on at `atMs`: an episode may begin or end with no sample.
    package mutating func tick(atMs: Int64) -> Transition? {
        // All quiet, the common case: nothing to age, judge or blame (the ingest path's cost).
        if evidence.isEmpty, state == .ok {
            risingSinceMs = nil
            if !blamed.isEmpty { blamed = [:] }
            return nil
        }
        evidence = evidence.filter { $0.value.untilMs >= atMs }
        blame(atMs: atMs)
        let seen = judge(atMs: atMs)
        if seen > state {
            clearSinceMs = nil
            let since = risingSinceMs ?? atMs
            risingSinceMs = since
            guard Double(atMs - since) >= settings.enterSeconds * 1000 else { return nil }
            return move(to: seen, atMs: atMs)
        }
        risingSinceMs = nil
        if seen == state {
            clearSinceMs = nil
            return nil
        }
        let since = clearSinceMs ?? atMs
        clearSinceMs = since
        guard Double(atMs - since) >= settings.clearSeconds * 1000 else { return nil }
        return move(to: seen, atMs: atMs)
    }

    private mutating func move(to next: IntegrityState, atMs: Int64) -> Transition {
        let transition = Transition(
            from: state, to: next, evidence: standing(atMs: atMs),
            alarm: next >= .jammed && !alarmed)
        if state == .ok { episodeBeganMs = risingSinceMs ?? atMs }
        if next >= .jammed { alarmed = true }
        if next == .ok {
            alarmed = false
            episodeBeganMs = nil
        }
        state = next
        risingSinceMs = nil
        clearSinceMs = nil
        return transition
    }

    /// What the standing evidence makes of the vessel: any spoofing evidence, spoofed; every
    /// present receiver's signal gone under way, jammed; anything else, degraded.
    private func judge(atMs: Int64) -> IntegrityState {
        let standing = standing(atMs: atMs)
        guard !standing.isEmpty else { return .ok }
        if standing.contains(where: { $0.implies == .spoofed }) { return .spoofed }
        let weak = Set(standing.map(\.kind)).intersection([.velocity, .uniformSignal])
        if weak.count == 2 { return .spoofed }
        let present = receivers.filter { atMs - $0.value.lastSampleAtMs <= Self.presentMs }.keys
        let lost = Set(standing.filter { $0.kind == .signalCollapse || $0.kind == .fixLost }.flatMap(\.sources))
        if !present.isEmpty, present.allSatisfy(lost.contains) { return .jammed }
        return .degraded
    }

    /// `source`'s fix against every other receiver's fix of the same second.
    private mutating func comparePairs(_ source: String, fix: GNSSSample.Fix, atMs: Int64) -> [IntegrityEvidence] {
        var found: [IntegrityEvidence] = []
        for (other, track) in receivers where other != source {
            guard let theirs = track.lastFix, abs(theirs.timeMs - fix.timeMs) <= 1_000,
                atMs - track.lastSampleAtMs <= Self.presentMs
            else { continue }
            let names = [source, other].sorted()
            let key = names.joined(separator: "|")
            let metres = Geo.distance(lat1: fix.lat, lon1: fix.lon, lat2: theirs.lat, lon2: theirs.lon)
            var pair = pairs[key] ?? PairBaseline()
            if let strayed = pair.take(metres, settings: settings, learning: state == .ok) {
                found.append(IntegrityEvidence(kind: .separation, sources: names, detail: strayed))
            }
            pairs[key] = pair
        }
        return found
    }
}

/// Two receivers' distance: its usual value and noise, learned while all is well, and whether a
/// distance strays from it (apart: one is pulled; together: one transmitter feeds both).
struct PairBaseline {
    private var samples = 0
    private var usual = 0.0
    private var noise = 0.0

    /// Samples before a learned separation is trusted.
    static let learnedAfter = 30

    /// - Returns: what strayed, in words, or nil.
    mutating func take(_ metres: Double, settings: IntegritySettings, learning: Bool) -> String? {
        let reference = settings.separationMetres ?? (samples >= Self.learnedAfter ? usual : nil)
        let threshold = max(settings.toleranceMetres, 4 * noise)
        var strayed: String?
        if let reference {
            if abs(metres - reference) > threshold {
                strayed = "\(ReceiverTrack.metres(metres)) apart, usually \(ReceiverTrack.metres(reference))"
            } else if reference >= 8, metres < reference / 4, noise < reference / 4 {
                strayed = "\(ReceiverTrack.metres(metres)) apart, usually \(ReceiverTrack.metres(reference)): converged"
            }
        }
        if learning, strayed == nil, reference == nil || abs(metres - reference!) < threshold / 2 {
            samples += 1
            let weight = 1 / Double(min(samples, 100))
            noise = samples == 1 ? 0 : noise * (1 - weight) + abs(metres - usual) * weight
            usual = samples == 1 ? metres : usual * (1 - weight) + metres * weight
        }
        return strayed
    }
}

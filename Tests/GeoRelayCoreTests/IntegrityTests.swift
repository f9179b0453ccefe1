import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// GNSS jamming and spoofing seen across a vessel's receivers (issue 49): voyages written by
/// `Tests/Helpers/gnss_voyage.py` with one attack each, and the real receivers' logs as the clean set.
@Suite(.offThePool) struct IntegrityTests {
    /// What the watch made of a voyage: its transitions, when, and when the attack showed.
    struct Outcome: CustomStringConvertible {
        var transitions: [(atMs: Int64, transition: IntegrityMonitor.Transition)] = []
        var evidenceMs: Int64?
        var header = ""

        /// From the attack's first sign in the receivers' reports to the vessel entering `state`.
        func detection(_ state: IntegrityState) -> Int64? {
            guard let evidenceMs, let entered = transitions.first(where: { $0.transition.to >= state }) else {
                return nil
            }
            return entered.atMs - evidenceMs
        }

        var description: String {
            header + "; "
                + transitions.map {
                    "\($0.atMs) ms \($0.transition.from)→\($0.transition.to) \($0.transition.evidence)"
                }
                .joined(separator: "; ")
        }
    }

    static func voyage(_ arguments: [String], settings: IntegritySettings = IntegritySettings()) throws -> Outcome {
        let voyage = try GNSSVoyage(arguments)
        var outcome = Outcome(evidenceMs: voyage.evidenceMs, header: voyage.header)
        var watches: [String: ReceiverWatch] = [:]
        var monitor = IntegrityMonitor(settings: settings)
        for line in voyage.lines {
            let sentence = try NMEASentence.parse(line.sentence)
            guard
                let sample = watches[line.receiver, default: ReceiverWatch(source: line.receiver)].feed(
                    sentence, atMs: line.atMs)
            else { continue }
            if let transition = monitor.observe(sample) { outcome.transitions.append((line.atMs, transition)) }
        }
        return outcome
    }

    /// Half an hour a seed in `make test`, three hours in the long form.
    static let cleanSeconds = ProcessInfo.processInfo.environment["GEORELAY_LONG_TESTS"] != nil ? 10_800 : 1_800

    @Test(arguments: [1, 2, 3])
    func cleanSailingRaisesNothing(seed: Int) throws {
        let outcome = try Self.voyage(["--seed", "\(seed)", "--seconds", "\(Self.cleanSeconds)"])
        #expect(outcome.transitions.isEmpty, "\(outcome)")
    }

    /// Meaconing: one receiver reports a position 3.2 km away.
    @Test(arguments: [1, 2])
    func aJumpIsSpoofingWithinFiveSeconds(seed: Int) throws {
        let outcome = try Self.voyage(["--seed", "\(seed)", "--attack", "jump"])
        let took = try #require(outcome.detection(.spoofed), "\(outcome)")
        print("integrity: jump, seed \(seed): spoofed \(took) ms after the first false fix")
        #expect(took <= 5_000, "\(outcome)")
        #expect(outcome.transitions.first?.transition.alarm == true, "\(outcome)")
    }

    /// A slow pull of 1 m/s on one of two receivers 10 m apart.
    @Test(arguments: [1, 2, 3])
    func aSlowPullIsSeenBetweenTwoReceiversWithinAMinute(seed: Int) throws {
        let outcome = try Self.voyage(["--seed", "\(seed)", "--attack", "pull", "--pull", "1", "--separation", "10"])
        let took = try #require(outcome.detection(.spoofed), "\(outcome)")
        print("integrity: pull 1 m/s, 10 m apart, seed \(seed): spoofed \(took) ms after the pull began")
        #expect(took <= 60_000, "\(outcome)")
        #expect(outcome.transitions.allSatisfy { $0.transition.evidence.allSatisfy { $0.kind == .separation } })
    }

    /// An old track replayed, the receiver's times with it.
    @Test func aReplayedTrackIsSpoofing() throws {
        let outcome = try Self.voyage(["--attack", "replay"])
        let took = try #require(outcome.detection(.spoofed), "\(outcome)")
        print("integrity: replay of 5 minutes ago: spoofed \(took) ms after it began")
        #expect(took <= 5_000, "\(outcome)")
        #expect(outcome.transitions.first?.transition.evidence.contains { $0.kind == .clockStep } == true, "\(outcome)")
    }

    /// Both receivers jammed over 30 s; one alone is only degraded.
    @Test func jammingBothReceiversIsJammedWithinFiveSeconds() throws {
        let outcome = try Self.voyage(["--attack", "jam", "--victims", "2"])
        let took = try #require(outcome.detection(.jammed), "\(outcome)")
        print("integrity: jamming ramp on both: jammed \(took) ms after C/N0 halved or the fix went")
        #expect(took <= 5_000, "\(outcome)")
        #expect(outcome.transitions.allSatisfy { $0.transition.to < .spoofed }, "\(outcome)")
        let one = try Self.voyage(["--attack", "jam", "--victims", "1"])
        #expect(one.transitions.map(\.transition.to) == [.degraded], "\(one)")
    }

    /// One spoofer for both receivers: they converge on its solution, its C/N0 even.
    @Test func receiversThatConvergeAreSpoofed() throws {
        let outcome = try Self.voyage(["--attack", "converge", "--separation", "30"])
        let took = try #require(outcome.detection(.spoofed), "\(outcome)")
        print("integrity: two receivers 30 m apart converging: spoofed \(took) ms after")
        #expect(took <= 5_000, "\(outcome)")
        let evidence = outcome.transitions.first?.transition.evidence ?? []
        #expect(evidence.contains { $0.kind == .separation && $0.detail.hasSuffix("converged") }, "\(outcome)")
        #expect(evidence.contains { $0.kind == .uniformSignal }, "\(outcome)")
    }

    /// An episode ends once all has been clear for `clearSeconds`, and its alarm is raised once.
    @Test func anEpisodeEndsWhenClearAndAlarmsOnce() {
        var monitor = IntegrityMonitor()
        func fix(_ second: Int64, lat: Double) -> GNSSSample {
            GNSSSample(
                source: "gps1", atMs: second * 1000,
                fix: .init(timeMs: 1_784_953_800_000 + second * 1000, lat: lat, lon: 10.9, speed: 0, course: 0))
        }
        var transitions: [IntegrityMonitor.Transition] = []
        for second in Int64(0)..<200 {
            // Two jumps, 40 s apart, then quiet: one episode, one alarm.
            let lat = (10..<50).contains(second) ? 59.05 : 59.0
            if let t = monitor.observe(fix(second, lat: lat)) { transitions.append(t) }
        }
        #expect(transitions.map(\.to) == [.spoofed, .ok], "\(transitions)")
        #expect(transitions.map(\.alarm) == [true, false])
    }

    /// Every real receiver's log, start to end: not one episode.
    @Test(.enabled(if: SharedTestData.haveNMEA, "../shared/testdata/nmea is absent: the clean set is skipped"))
    func theReceiversLogsRaiseNothing() throws {
        let logs = try FileManager.default.contentsOfDirectory(atPath: SharedTestData.nmea.path)
            .filter { $0.hasSuffix(".log") }.sorted()
        #expect(logs.count >= 40)
        var samples = 0
        for log in logs {
            let text = try String(contentsOf: SharedTestData.nmea.appendingPathComponent(log), encoding: .isoLatin1)
            var watch = ReceiverWatch(source: log)
            var monitor = IntegrityMonitor()
            // The relay's clock follows the receiver's own times (what the log does not record).
            var clockMs: Int64 = 0
            var lastTime: Int64?
            for line in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
                guard let sentence = try? NMEASentence.parse(String(line)) else { continue }
                if ["RMC", "GGA"].contains(sentence.type), let time = sentence.timeOfDayMs(0) {
                    clockMs += lastTime.map { time >= $0 ? time - $0 : 1000 } ?? 0
                    lastTime = time
                }
                guard let sample = watch.feed(sentence, atMs: clockMs) else { continue }
                samples += 1
                let transition = monitor.observe(sample)
                #expect(transition == nil, "\(log): \(transition.map { "\($0)" } ?? "")")
            }
        }
        #expect(samples > 700, "the logs' fix cycles were read")
    }
}

import GeoRelayCore
import GeoRelayService
import GeoRelayTestTraits
import Synchronization
import Testing

/// The relay's parts: children of one group, stopped one at a time in the order asked, each
/// awaited before the next, none left running when the group returns.
@Suite(.offThePool) struct PartGroupTests {
    /// What the parts did, in order.
    final class Journal: Sendable {
        private let entries = Mutex<[String]>([])
        func note(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    /// A part that runs until cancelled, then takes a moment to wind down (as the watchdog
    /// removing its file does), so a stop that did not await it would let the next one overtake.
    static func waiting(_ name: String, _ journal: Journal) -> PartGroup.Part {
        .init(name) {
            journal.note("\(name) started")
            while !Task.isCancelled { try? await Task.sleep(for: .seconds(60)) }
            sleepBlocking(seconds: 0.05)
            journal.note("\(name) ended")
        }
    }

    @Test func partsStopInTheOrderAskedEachAwaitedAndTheRestAtTheEnd() async {
        let journal = Journal()
        let started = WakeSignal()
        let stopRequested = WakeSignal()
        // A part with a stop of its own, as the ingest loop's: it ends when asked, not by cancellation.
        let own = PartGroup.Part(
            "ingest",
            run: {
                journal.note("ingest started")
                started.signal()
                await stopRequested.wait()
                journal.note("ingest ended")
            },
            stop: {
                journal.note("ingest asked")
                stopRequested.signal()
            })
        let group = PartGroup([
            Self.waiting("uplinks", journal), Self.waiting("watchdog", journal), own, Self.waiting("upkeep", journal),
        ])
        let returned = await group.run { parts in
            await started.wait(timeout: .seconds(10))
            await parts.stop(["watchdog", "uplinks", "nonexistent"])
            journal.note("body: background stopped")
            await parts.stop(["ingest", "watchdog"])
            journal.note("body: ingest stopped")
            return 7
        }
        #expect(returned == 7)
        let events = journal.all
        func index(_ entry: String) -> Int {
            events.firstIndex(of: entry)
                ?? {
                    Issue.record("no \(entry) in \(events)")
                    return -1
                }()
        }
        #expect(index("watchdog ended") < index("uplinks ended"), "\(events)")
        #expect(index("uplinks ended") < index("body: background stopped"), "\(events)")
        #expect(index("ingest asked") < index("ingest ended"), "\(events)")
        #expect(index("ingest ended") < index("body: ingest stopped"), "\(events)")
        // The one the body left running is stopped when it returns, before `run` does.
        #expect(events.last == "upkeep ended", "\(events)")
        // Each part ran and ended once.
        for name in ["uplinks", "watchdog", "ingest", "upkeep"] {
            #expect(events.filter { $0 == "\(name) ended" }.count == 1, "\(name): \(events)")
        }
    }

    /// A part that returns on its own (a monitor with nothing to watch) is not waited for again.
    @Test func aPartThatEndedOnItsOwnStopsAtOnce() async {
        let journal = Journal()
        let group = PartGroup([.init("brief") { journal.note("brief ran") }, Self.waiting("long", journal)])
        await group.run { parts in
            await parts.stop(["brief"])
            journal.note("body: brief stopped")
        }
        #expect(journal.all.contains("brief ran"))
        #expect(journal.all.last == "long ended", "\(journal.all)")
    }
}

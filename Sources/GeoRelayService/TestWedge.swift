import GeoRelayCore

/// A stall of one of the relay's loops on a schedule: the watchdog tests' way of wedging a
/// real relay from outside (`GEORELAY_TEST_WEDGE`, read into `FaultInjection`).
package struct TestWedge: Sendable, Equatable {
    package enum Part: String, Sendable, CaseIterable {
        /// The ingest event loop's thread sleeps: nothing is read or answered.
        case ingest
        /// The spool writer's queue sleeps: writes wait (nothing is lost).
        case writer
    }

    package var part: Part
    package var duration: Duration
    /// From the relay's start (`READY=1`).
    package var after: Duration

    package init(part: Part, duration: Duration, after: Duration = .zero) {
        self.part = part
        self.duration = duration
        self.after = after
    }

    /// `PART:SECONDS[@AFTER]`, comma-separated: `ingest:3` stalls the ingest loop for 3 s at
    /// start, `writer:8@3` the spool writer for 8 s from 3 s after start.
    package static func parse(_ spec: String) throws(RelayError) -> [TestWedge] {
        var wedges: [TestWedge] = []
        for item in spec.split(separator: ",") {
            let fields = item.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            let timing =
                fields.count == 2 ? fields[1].split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false) : []
            guard fields.count == 2, let part = Part(rawValue: String(fields[0])),
                let seconds = timing.first.flatMap({ Double($0) }), seconds > 0, seconds <= 3600,
                let after = timing.count == 2 ? Double(timing[1]) : 0, after >= 0, after <= 3600
            else {
                throw RelayError(
                    "GEORELAY_TEST_WEDGE '\(item)': expected PART:SECONDS[@AFTER] with PART one of \(Part.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            wedges.append(
                TestWedge(
                    part: part, duration: .milliseconds(Int64(seconds * 1000)),
                    after: .milliseconds(Int64(after * 1000))))
        }
        return wedges
    }
}

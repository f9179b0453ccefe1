import GeoRelayCore

/// Faults a test injects into a real relay from outside: the one seam production code has for
/// tests. Only the command line builds it, from the environment, and hands it to what it runs; a
/// relay or a status started any other way has none.
///
/// - Important: Read only with `GEORELAY_TEST_HOOKS=1`. A hook's variable without it is ignored
///   (and the relay says so), so a stray variable in a unit file cannot wedge a relay at sea.
package struct FaultInjection: Sendable, Equatable {
    /// Stalls of the relay's loops on a schedule (`GEORELAY_TEST_WEDGE`, `TestWedge.parse`).
    package var wedges: [TestWedge] = []
    /// Stands in for adjtimex's answer (`GEORELAY_TEST_CLOCK_SYNC=synchronised|unsynchronised`),
    /// so the test machine's own clock discipline does not decide what a test sees.
    package var clockSync: ClockSync?
    /// Hook variables that were set without `GEORELAY_TEST_HOOKS=1`, and so ignored.
    package var ignored: [String] = []

    package static let none = FaultInjection()

    package init(wedges: [TestWedge] = [], clockSync: ClockSync? = nil, ignored: [String] = []) {
        self.wedges = wedges
        self.clockSync = clockSync
        self.ignored = ignored
    }

    /// The variables that name a fault.
    package static let variables = ["GEORELAY_TEST_WEDGE", "GEORELAY_TEST_CLOCK_SYNC"]

    /// What `environment` asks for; a hook's value that cannot be read is an error naming it.
    package static func from(environment: [String: String]) throws(RelayError) -> FaultInjection {
        let set = variables.filter { !(environment[$0] ?? "").isEmpty }
        guard environment["GEORELAY_TEST_HOOKS"] == "1" else { return FaultInjection(ignored: set) }
        var faults = FaultInjection()
        if let spec = environment["GEORELAY_TEST_WEDGE"], !spec.isEmpty {
            faults.wedges = try TestWedge.parse(spec)
        }
        if let forced = environment["GEORELAY_TEST_CLOCK_SYNC"], !forced.isEmpty {
            switch forced {
            case "synchronised": faults.clockSync = .synchronised(maxErrorMs: 1)
            case "unsynchronised": faults.clockSync = .unsynchronised(maxErrorMs: 16_000)
            default: throw RelayError("GEORELAY_TEST_CLOCK_SYNC=\(forced): expected synchronised or unsynchronised")
            }
        }
        return faults
    }
}

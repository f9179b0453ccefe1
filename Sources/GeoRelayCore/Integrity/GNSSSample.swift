/// What the integrity watch needs from one fix cycle of one receiver: where it says the vessel
/// is, when by its own clock, and what it says of the sky it hears. Sources without the sky (a
/// phone, the JSON line protocol) are judged on their fixes alone.
package struct GNSSSample: Sendable, Equatable {
    /// The receiver (`devices[].sources`' name).
    package var source: String
    /// The relay's monotonic clock, in ms, when the cycle ended: the only clock the watch trusts.
    package var atMs: Int64
    /// nil: the receiver reported the cycle without a fix (RMC `V`, GGA quality 0).
    package var fix: Fix?
    package var sky: Sky?
    /// The relay's wall clock when the cycle ended, where known: tells a receiver clock that
    /// jumps ahead of it from one catching up with it (a collector's buffered history).
    package var wallMs: Int64?

    package struct Fix: Sendable, Equatable {
        /// The receiver's UTC for the fix, ms since the epoch.
        package var timeMs: Int64
        package var lat: Double
        package var lon: Double
        /// Over ground as the receiver reports it, m/s and degrees.
        package var speed: Double?
        package var course: Double?

        package init(timeMs: Int64, lat: Double, lon: Double, speed: Double? = nil, course: Double? = nil) {
            self.timeMs = timeMs
            self.lat = lat
            self.lon = lon
            self.speed = speed
            self.course = course
        }
    }

    /// The satellites the receiver hears, from its last complete `GSV` sets.
    package struct Sky: Sendable, Equatable {
        /// Carrier-to-noise density (NMEA's SNR), dB-Hz, of every satellite heard (SNR above 0).
        package var cn0: [Double]
        /// Satellites in view, heard or not.
        package var inView: Int
        /// Satellites used in the fix (`GGA`), when given.
        package var used: Int?
        package var hdop: Double?

        package init(cn0: [Double], inView: Int, used: Int? = nil, hdop: Double? = nil) {
            self.cn0 = cn0
            self.inView = inView
            self.used = used
            self.hdop = hdop
        }

        package var meanCN0: Double? { cn0.isEmpty ? nil : cn0.reduce(0, +) / Double(cn0.count) }

        /// The population standard deviation of the heard satellites' C/N0.
        package var spreadCN0: Double? {
            guard let mean = meanCN0 else { return nil }
            let variance = cn0.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(cn0.count)
            return variance.squareRoot()
        }
    }

    package init(source: String, atMs: Int64, fix: Fix?, sky: Sky? = nil, wallMs: Int64? = nil) {
        self.source = source
        self.atMs = atMs
        self.fix = fix
        self.sky = sky
        self.wallMs = wallMs
    }
}

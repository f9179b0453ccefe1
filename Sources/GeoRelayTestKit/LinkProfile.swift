/// A link from `../shared/LINKS.md`: delay added each way, bandwidth each way shared by every
/// connection over it, given out a segment at a time.
package struct LinkProfile: Sendable, CustomStringConvertible {
    package var name: String
    package var oneWay: Duration
    /// Each way.
    package var bytesPerSecond: Int

    package init(name: String, oneWay: Duration, bytesPerSecond: Int) {
        self.name = name
        self.oneWay = oneWay
        // At most a gigabyte a second: the serialisation's arithmetic stays far inside Int64.
        self.bytesPerSecond = min(1_000_000_000, max(1, bytesPerSecond))
    }

    /// A host on the same switch: what a test of a round's logic, not of a link, runs on.
    package static let lan = LinkProfile(name: "lan", oneWay: .microseconds(100), bytesPerSecond: 125_000_000)
    package static let geo = LinkProfile(name: "geo", oneWay: .milliseconds(300), bytesPerSecond: 256_000 / 8)
    package static let geoSlow = LinkProfile(name: "geo-slow", oneWay: .milliseconds(350), bytesPerSecond: 64_000 / 8)
    package static let narrowband = LinkProfile(
        name: "narrowband", oneWay: .milliseconds(700), bytesPerSecond: 9_600 / 8)
    package static let cellularEdge = LinkProfile(
        name: "cellular-edge", oneWay: .milliseconds(80), bytesPerSecond: 128_000 / 8)
    package static let leo = LinkProfile(name: "leo", oneWay: .milliseconds(25), bytesPerSecond: 20_000_000 / 8)

    /// The satellite and edge profiles a figure users feel is measured on.
    package static let uplinks = [geo, geoSlow, narrowband, cellularEdge, leo]
    /// The satellite profiles the benchmark's drains run on.
    package static let satellites = [geo, geoSlow, narrowband]

    /// How long `bytes` take to leave one end (serialisation), rounded up to a nanosecond.
    package func serialisation(of bytes: Int) -> Duration {
        // Whole seconds first, then the remainder's nanoseconds: no product that could overflow.
        let (rate, count) = (Int64(bytesPerSecond), Int64(max(0, bytes)))
        return .seconds(count / rate) + .nanoseconds(((count % rate) * 1_000_000_000 + rate - 1) / rate)
    }

    package var roundTrip: Duration { oneWay * 2 }

    /// The one-way delay in whole milliseconds, as the kernel's and the proxy's delay lines take it.
    package var oneWayMs: Int {
        let (seconds, attoseconds) = oneWay.components
        guard seconds < Int64.max / 1000 else { return .max }
        return Int(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }

    package var description: String { name }
}

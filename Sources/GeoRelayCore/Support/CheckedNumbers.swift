/// Conversions and arithmetic on numbers from outside (a server's answer, a file another process
/// wrote, a stored row) that cannot trap. Swift's `Int64(_:)` of a Double traps on NaN, infinity
/// and anything past ±2⁶³, and `-` traps on overflow; one such number must never crash-loop the relay.
package enum CheckedNumbers {
    /// Ten years, the longest span of seconds any server answer or file is taken to mean.
    package static let longestSeconds: Double = 315_360_000

    /// `seconds` as whole milliseconds when it is finite and within 0…`maxSeconds`; nil otherwise.
    package static func milliseconds(seconds: Double, max maxSeconds: Double = longestSeconds) -> Int64? {
        guard seconds.isFinite, seconds >= 0, seconds <= maxSeconds else { return nil }
        return Int64(exactly: (seconds * 1000).rounded())
    }

    /// `value` as an Int64 when it is a finite number that fits (rounded); nil otherwise.
    package static func int64(_ value: Double) -> Int64? {
        guard value.isFinite else { return nil }
        return Int64(exactly: value.rounded())
    }

    /// `value` as an Int32 when it is a finite whole number that fits; nil otherwise.
    package static func int32(_ value: Double) -> Int32? {
        guard value.isFinite else { return nil }
        return Int32(exactly: value.rounded())
    }
}

extension Int64 {
    /// `self - other`, held at `Int64.min`/`.max` instead of trapping: ages and gaps between a clock
    /// and a stored time, where either may be anything an older spool or a planted file holds.
    @inline(__always)
    package func saturatingMinus(_ other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        return overflow ? (other > 0 ? .min : .max) : difference
    }

    /// `self + other`, held at the ends instead of trapping.
    @inline(__always)
    package func saturatingPlus(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }
}

extension UInt64 {
    /// `self + other`, held at `.max` instead of trapping: a monotonic deadline far enough away.
    @inline(__always)
    package func saturatingPlus(_ other: UInt64) -> UInt64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? .max : sum
    }
}

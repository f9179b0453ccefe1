/// Chooses the zstd level batch by batch: the one that sends the fewest bytes while preparing the
/// next batch still takes no longer than the link needs for the one before it.
///
/// A backlog goes as a pipeline: while one batch crosses the link the next is read from the spool
/// and compressed. Compression is free as long as that preparation fits in the crossing; past it,
/// the link idles. Three levels, measured on a 1 Hz vessel track and a fleet's interleaved one
/// (`georelay-bench --only compression`): 16 sends what 19 sends (within 1 %) for half its CPU;
/// 15 a few per cent more for a quarter of 16's; 7 a tenth more again, for almost nothing, where
/// bytes level off on a fast link. The planner keeps running estimates (exponentially weighted) of
/// the link's rate and of how this machine and this data compare with the measured starting points,
/// one factor each for CPU and for ratio, learned from whichever level ran. Until the link has been
/// measured it assumes a metered one.
package struct CompressionPlanner: Sendable {
    package static let fastLevel = 7
    package static let middleLevel = 15
    package static let thoroughLevel = 16

    private struct Estimate: Sendable {
        /// Seconds of CPU per byte of JSON.
        var costPerByte: Double
        /// Compressed bytes per byte of JSON.
        var ratio: Double
    }

    /// Starting points, best ratio first: a 500-position batch of a 1 Hz track on the development
    /// machine (BENCHMARKS.md, compression).
    private static let measured: [(level: Int, estimate: Estimate)] = [
        (thoroughLevel, Estimate(costPerByte: 200e-9, ratio: 0.079)),
        (middleLevel, Estimate(costPerByte: 80e-9, ratio: 0.081)),
        (fastLevel, Estimate(costPerByte: 7e-9, ratio: 0.089)),
    ]

    /// A fixed level from the configuration, or nil to adapt.
    private let fixed: Int?
    /// This machine's CPU cost against the starting points', and this data's ratio against theirs.
    private var cpuFactor = 1.0
    private var ratioFactor = 1.0
    /// Upload bytes per second, once measured.
    private(set) var uploadRate: Double?
    /// Seconds to read and plan a batch from the spool, besides compressing it.
    private var planningSeconds = 0.0

    package init(fixedLevel: Int?) {
        fixed = fixedLevel
    }

    /// The level to compress `jsonBytes` bytes with.
    package func level(forJSONBytes jsonBytes: Int) -> Int {
        if let fixed { return fixed }
        guard let rate = uploadRate, rate > 0 else { return Self.thoroughLevel }
        let bytes = Double(jsonBytes)
        for (level, estimate) in Self.measured {
            let preparing = planningSeconds + estimate.costPerByte * cpuFactor * bytes
            let crossing = estimate.ratio * ratioFactor * bytes / rate
            if preparing <= crossing { return level }
        }
        return Self.fastLevel
    }

    /// What a compression at `level` cost and achieved.
    package mutating func recordCompression(level: Int, jsonBytes: Int, compressedBytes: Int, seconds: Double) {
        guard jsonBytes > 4096, seconds.isFinite, seconds >= 0,
            let estimate = Self.measured.first(where: { $0.level == level })?.estimate
        else { return }
        let bytes = Double(jsonBytes)
        cpuFactor = 0.7 * cpuFactor + 0.3 * (seconds / bytes / estimate.costPerByte)
        ratioFactor = 0.7 * ratioFactor + 0.3 * (Double(compressedBytes) / bytes / estimate.ratio)
    }

    /// How long reading and planning a batch took.
    package mutating func recordPlanning(seconds: Double) {
        guard seconds.isFinite, seconds >= 0 else { return }
        planningSeconds = 0.7 * planningSeconds + 0.3 * seconds
    }

    /// An upload of `bytes` that took `seconds` from request to answer (a round trip included:
    /// an estimate on the slow side, so before the pipeline has measured the link it leans
    /// towards fewer bytes).
    package mutating func recordUpload(bytes: Int, seconds: Double) {
        guard bytes > 1024, seconds > 0 else { return }
        let rate = Double(bytes) / seconds
        uploadRate = uploadRate.map { 0.7 * $0 + 0.3 * rate } ?? rate
    }

    /// The link's rate as the pipeline measured it (back-to-back answers' spacing over their bytes):
    /// what a batch's crossing takes while others queue beside it, which request-to-answer times,
    /// a round trip and the wait behind other batches in them, overstate several times.
    package mutating func recordLinkRate(secondsPerByte: Double) {
        guard secondsPerByte.isFinite, secondsPerByte > 0 else { return }
        uploadRate = 1 / secondsPerByte
    }
}

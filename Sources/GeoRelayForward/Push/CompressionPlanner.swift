/// Chooses the zstd level batch by batch: spend CPU on compression only where
/// the uplink is slow enough for the bytes saved to be worth it.
///
/// It keeps running estimates (exponentially weighted) of the link's upload
/// rate and, per level, of the compression cost per JSON byte and the ratio
/// achieved. The next batch is compressed while the current one is on the
/// wire, so the thorough level costs nothing as long as it finishes within the
/// current batch's upload time: it is chosen then, and the fast level when the
/// link is quicker than the CPU. On a satellite link that means always; on a
/// LAN or loopback, never. Until the link has been measured it assumes a metered one.
package struct CompressionPlanner: Sendable {
    package static let fastLevel = 7
    package static let thoroughLevel = 19

    private struct Estimate: Sendable {
        /// Seconds of CPU per byte of JSON.
        var costPerByte: Double
        /// Compressed bytes per byte of JSON.
        var ratio: Double
    }

    /// A fixed level from the configuration, or nil to adapt.
    private let fixed: Int?
    private var estimates: [Int: Estimate] = [
        // Starting points measured on a 1 Hz track (BENCHMARKS.md); refined as batches go.
        fastLevel: Estimate(costPerByte: 7e-9, ratio: 0.089),
        thoroughLevel: Estimate(costPerByte: 150e-9, ratio: 0.080),
    ]
    /// Upload bytes per second, once measured.
    private(set) var uploadRate: Double?

    package init(fixedLevel: Int?) {
        fixed = fixedLevel
    }

    /// The level to compress `jsonBytes` bytes with.
    package func level(forJSONBytes jsonBytes: Int) -> Int {
        if let fixed { return fixed }
        guard let rate = uploadRate, let fast = estimates[Self.fastLevel], let thorough = estimates[Self.thoroughLevel] else {
            return Self.thoroughLevel
        }
        let bytes = Double(jsonBytes)
        let thoroughCPU = thorough.costPerByte * bytes
        let upload = fast.ratio * bytes / rate
        return thoroughCPU <= upload ? Self.thoroughLevel : Self.fastLevel
    }

    /// What a compression at `level` cost and achieved.
    package mutating func recordCompression(level: Int, jsonBytes: Int, compressedBytes: Int, seconds: Double) {
        guard jsonBytes > 4096, var estimate = estimates[level] else { return }
        let bytes = Double(jsonBytes)
        estimate.costPerByte = 0.7 * estimate.costPerByte + 0.3 * (seconds / bytes)
        estimate.ratio = 0.7 * estimate.ratio + 0.3 * (Double(compressedBytes) / bytes)
        estimates[level] = estimate
    }

    /// An upload of `bytes` that took `seconds` from request to answer.
    package mutating func recordUpload(bytes: Int, seconds: Double) {
        guard bytes > 1024, seconds > 0 else { return }
        let rate = Double(bytes) / seconds
        uploadRate = uploadRate.map { 0.7 * $0 + 0.3 * rate } ?? rate
    }
}

import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// The fuzzers' corpus and every crash they found (`Tests/Fuzz`), replayed through the same
/// targets on every test run: a crash fixed once stays fixed without the fuzzer.
@Suite(.offThePool) struct FuzzRegressionTests {
    static let fuzz = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz")

    static func inputs(_ target: String) throws -> [URL] {
        let corpus = fuzz.appendingPathComponent("corpus/\(target)")
        let crashes = fuzz.appendingPathComponent("crashes")
        let files =
            try FileManager.default.contentsOfDirectory(at: corpus, includingPropertiesForKeys: nil)
            + ((try? FileManager.default.contentsOfDirectory(at: crashes, includingPropertiesForKeys: nil)) ?? [])
            .filter { $0.lastPathComponent.hasPrefix("\(target)-") }
        return files.sorted { $0.path < $1.path }
    }

    @Test(arguments: ["lines", "config", "encoders"])
    func corpusAndCrashesReplayWithoutCrashing(target: String) async throws {
        let files = try Self.inputs(target)
        #expect(!files.isEmpty, "no corpus for \(target)")
        try await offThePool {
            for file in files {
                let bytes = try [UInt8](Data(contentsOf: file))
                bytes.withUnsafeBytes { bytes in
                    switch target {
                    case "lines": FuzzTargets.lines(bytes)
                    case "encoders": FuzzTargets.encoders(bytes)
                    default: FuzzTargets.config(bytes)
                    }
                }
            }
        }
    }
}

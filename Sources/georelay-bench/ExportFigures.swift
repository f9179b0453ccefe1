import Foundation
import GeoRelayCore
import GeoRelayTestKit
import Glibc

/// The `export` figure: 1,000,000 spooled positions to GPX, time and peak RSS of the export process.
func exportFigure() throws {
    let count = quick ? 100_000 : 1_000_000
    let directory = try TemporaryDirectory()
    try fillSpool(directory, count: count, devices: 8, port: 9)
    let relay = try BenchRelay(directory: directory, destinationURL: deadURL())
    let process = Process()
    process.executableURL = URL(fileURLWithPath: binDirectory + "/georelay")
    process.arguments = ["export", "--format", "gpx", "--config", relay.configPath, "-o", directory.file("out.gpx")]
    process.standardOutput = FileHandle.nullDevice
    let started = WallClock.monotonicNs()
    try process.run()
    var peak = 0
    while process.isRunning {
        peak = max(peak, peakRSSBytes(process.processIdentifier))
        usleep(20_000)
    }
    let seconds = Double(WallClock.monotonicNs() - started) / 1e9
    let size =
        (try? FileManager.default.attributesOfItem(atPath: directory.file("out.gpx"))[.size] as? NSNumber)?.intValue
        ?? 0
    emit(
        "export_gpx",
        [
            ("positions", .number(Double(count))), ("seconds", .number((seconds * 100).rounded() / 100)),
            ("peak_rss_bytes", .number(Double(peak))), ("file_bytes", .number(Double(size))),
            ("target", .string("constant memory, < 30 MB")),
        ])
}

import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
import Glibc
import Synchronization

// georelay-bench: the relay's figures against this machine's own limits,
// measured in the same run. One JSON line per figure on stdout.
// Usage: swift run -c release georelay-bench [--quick] [--only NAME]

#if DEBUG
    FileHandle.standardError.write(
        Data("warning: georelay-bench built in debug mode; figures are meaningless. Use -c release.\n".utf8))
#endif

let arguments = CommandLine.arguments
let quick = arguments.contains("--quick")
let only = arguments.firstIndex(of: "--only").map { arguments[$0 + 1] }
let binDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    .path
// GEORELAY_BENCH_RELAY=path: another build's relay under this bench (an A/B against an older commit).
setenv("GEORELAY_BIN", ProcessInfo.processInfo.environment["GEORELAY_BENCH_RELAY"] ?? binDirectory + "/georelay", 1)

func want(_ name: String) -> Bool { only == nil || only == name }

note(
    "machine: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory >> 30) GiB"
)
if want("ingest") { try ingestFigure() }
if want("latency") { try latencyFigure() }
if want("forward") { try forwardFigure() }
if want("memory") { try memoryFigure() }
if want("idle") { try idleFigure() }
if want("flash") { try flashFigure() }
if want("compression") { try compressionFigure() }
if want("wire") { try wireFigure() }
if want("push-drain") { try pushDrainFigure() }
if want("alarm") { try alarmFigure() }
if want("day") { try dayFigure() }
if want("nmea") { try await nmeaFigure() }
if want("export") { try exportFigure() }
if want("http") { try httpFigure() }
if want("status") { try statusFigure() }
if want("restart") { try restartFigure() }
if want("sbd") { try sbdFigure() }
// Minutes per transport on a delayed, throttled link: only when asked for.
if only == "satellite" { try satelliteFigure() }
// A compressed day at sea behind a budgeted uplink, in network namespaces: only when asked for.
if only == "sea" { try seaFigure() }

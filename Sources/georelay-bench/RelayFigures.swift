import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
import Glibc
import Synchronization

/// The `ingest` figure.
func ingestFigure() throws {
    let ingest = try ingestThroughput()
    let limit = try sqliteLimit(rows: ingest.rows, groupSize: max(1, Int(ingest.groupSize.rounded())))
    emit(
        "ingest_positions_per_second",
        [
            ("value", .number(ingest.rate.rounded())), ("limit_sqlite_same_groups", .number(limit.rounded())),
            ("ratio", .number((ingest.rate / limit * 1000).rounded() / 1000)),
            ("mean_group_size", .number(ingest.groupSize.rounded())),
            ("collectors", .number(8)), ("positions", .number(Double(ingest.rows))),
            ("target", .string(">= 0.5 of limit and >= 100000")),
        ])
}

/// The `latency` figure.
func latencyFigure() throws {
    let latency = try steadyLatency(rate: 1000, seconds: quick ? 3 : 10)
    emit(
        "ingest_ack_latency_ms_at_1000_per_second",
        [
            ("p50", .number((latency.p50 * 1000).rounded() / 1000)),
            ("p99", .number((latency.p99 * 1000).rounded() / 1000)),
            ("max", .number((latency.max * 1000).rounded() / 1000)), ("target", .string("p99 <= 10")),
        ])
}

/// The `forward` figure.
func forwardFigure() throws {
    let limit = try wrkLimit()
    let count = quick ? 20_000 : 100_000
    // Pipelined (the default) and one request at a time through libcurl, on the same server.
    for (name, pipeline) in [("forward_positions_per_second", nil), ("forward_one_at_a_time_positions_per_second", 1)]
        as [(String, Int?)]
    {
        let forward = try forwardThroughput(count: count, pipeline: pipeline)
        emit(
            name,
            [
                ("value", .number(forward.rate.rounded())),
                ("limit_wrk_requests_per_second", limit.map { .number($0.rounded()) } ?? .null),
                ("ratio", limit.map { .number((forward.rate / $0 * 1000).rounded() / 1000) } ?? .null),
                (
                    "relay_cpu_us_per_position",
                    .number((forward.relayCPUSeconds / Double(max(1, forward.delivered)) * 1e7).rounded() / 10)
                ),
                ("positions", .number(Double(forward.delivered))),
                ("target", .string(pipeline == nil ? ">= 1.0 of limit, CPU <= 8.9 us/position" : ">= 0.5 of limit")),
            ])
    }
    let teltonika = try teltonikaForwardThroughput(count: count)
    emit(
        "forward_teltonika_positions_per_second",
        [
            ("value", .number(teltonika.rate.rounded())),
            (
                "relay_cpu_us_per_position",
                .number((teltonika.relayCPUSeconds / Double(max(1, teltonika.delivered)) * 1e7).rounded() / 10)
            ),
            ("positions", .number(Double(teltonika.delivered))), ("target", .string("as measured")),
        ])
}

/// The `memory` figure.
func memoryFigure() throws {
    let count = quick ? 100_000 : 1_000_000
    let drain = try forwardThroughput(count: count)
    emit(
        "drain_peak_rss_bytes",
        [
            ("value", .number(Double(drain.peakRSS))), ("positions", .number(Double(count))),
            ("drain_positions_per_second", .number(drain.rate.rounded())), ("target", .string("<= 52428800")),
        ])
}

/// The `idle` figure.
func idleFigure() throws {
    let seconds = quick ? 10 : 60
    let cpu = try idleCPU(seconds: seconds)
    emit(
        "idle_cpu_seconds",
        [
            ("value", .number((cpu * 1000).rounded() / 1000)), ("window_seconds", .number(Double(seconds))),
            ("collectors", .number(4)), ("target", .string("about 0")),
        ])
}

import Foundation
import GeoRelayCore
import GeoRelayTestKit
import Glibc

/// The `restart` figure: one spool drained after a clean start and, further on, after a SIGKILL in
/// the middle of a drain, each over the same number of positions from the relay's start (its
/// recovery of what the kill left included). A relay restarted by a crash, a watchdog or a power
/// cut should drain as fast as one restarted by its operator: target within 10 %.
func restartFigure() throws {
    let count = quick ? 60_000 : 200_000
    let slice = count / 10
    // A hundred devices, as a fleet's spool after an outage: the drain order's give-way covers them all.
    let (server, directory) = try spooledForOsmAnd(count: count, devices: 100)
    defer { server.http.stop() }
    let relay = try BenchRelay(directory: directory, destinationURL: "http://127.0.0.1:\(server.http.port)")

    let afterStop = try drainSlice(relay, server: server, slice: slice)
    relay.stop()
    // Killed halfway through a slice, with requests in flight and delivery state held.
    try relay.start()
    let killedAt = server.positions.count + slice / 2
    while server.positions.count < killedAt { usleep(10_000) }
    relay.process?.signal(SIGKILL)
    let afterKill = try drainSlice(relay, server: server, slice: slice)
    relay.stop()
    note(
        "restart: \(slice) positions of a \(count)-position spool (100 devices) drained in \(String(format: "%.2f", afterStop)) s after a clean start, \(String(format: "%.2f", afterKill)) s after a SIGKILL mid-drain"
    )
    emit(
        "drain_after_kill_seconds",
        [
            ("value", .number((afterKill * 100).rounded() / 100)),
            ("after_clean_start_seconds", .number((afterStop * 100).rounded() / 100)),
            ("ratio", .number((afterKill / afterStop * 1000).rounded() / 1000)),
            ("positions", .number(Double(slice))), ("spool_positions", .number(Double(count))),
            ("target", .string("<= 1.10 of after_clean_start_seconds")),
        ])
}

/// Starts the relay and times it from its start until the server has taken `slice` more
/// positions (counting any sent again after a kill, as the link carries them).
private func drainSlice(_ relay: BenchRelay, server: FakeOsmAndServer, slice: Int) throws -> Double {
    let target = server.positions.count + slice
    let started = WallClock.monotonicNs()
    try relay.start()
    while server.positions.count < target { usleep(10_000) }
    return Double(WallClock.monotonicNs() - started) / 1e9
}

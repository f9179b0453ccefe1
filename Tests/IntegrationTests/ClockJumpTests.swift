import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// The relay's side: its own wall clock steps while it runs (libfaketime,
/// with the monotonic clocks left real). Forward by 25 h: positions keep their fix times, both
/// destinations get everything, and the push token is not refreshed (its 24-hour schedule runs
/// on elapsed time, not on the wall clock). Then back by 28 h: collectors whose clocks were right
/// all along are still answered `ok`, although their fixes are now hours ahead of the relay's clock.
///
/// Delivery after the step back is not checked here: libfaketime also shifts the deadlines of the
/// Swift runtime's own monotonic timers by the step, so every `Task.sleep` in the relay would
/// wait out the 28 hours; a real clock step leaves those timers alone. The forwarders' own use
/// of the wall clock after a step back is covered in-process (`TraccarForwarderTests`
/// `aParkDeadlineBeyondOneParkPeriodIsAClockJumpAndIsIgnored`, `PushForwarderTests`
/// `aBatchReceivedBeforeTheClockWentBackIsNotHeldBack`).
@Suite(.offThePool) struct ClockJumpTests {
    static let library = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

    @Test func theRelaysOwnClockSteppingLosesNothingAndRefusesNobody() async throws {
        try #require(
            FileManager.default.fileExists(atPath: Self.library), "libfaketime missing (make test installs faketime)")
        let world = try RelayWorld()
        let push = try FakePushServer()
        defer { push.http.stop() }
        try world.writeConfig(
            moreDestinations: pushDestination(push).replacingOccurrences(
                of: "maxDelaySeconds: 0", with: "maxDelaySeconds: 1"))
        let offset = world.directory.file("clock-offset")
        try "+0".write(toFile: offset, atomically: true, encoding: .utf8)
        func step(_ text: String) throws { try text.write(toFile: offset, atomically: true, encoding: .utf8) }
        let relay = try RelayProcess(
            configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path,
            environment: [
                "LD_PRELOAD": Self.library, "FAKETIME_TIMESTAMP_FILE": offset, "FAKETIME_NO_CACHE": "1",
                "DONT_FAKE_MONOTONIC": "1",
            ])
        let client = try world.client()

        // Fixes stamped by a collector whose clock is right: the test's own.
        var sent: [Int64] = []
        func write(_ count: Int) throws {
            for _ in 0..<count {
                let ms = max(WallClock.nowMs() / 1000 * 1000, (sent.last ?? 0) + 1000)
                sent.append(ms)
                try client.write(#"{"device":"ship","time":\#(ms / 1000),"lat":59.9,"lon":10.7,"speed":3}"# + "\n")
                // One missing answer ends the test: waiting out the reply timeout for each of the rest would take minutes.
                let reply = try #require(
                    client.readLine(), "fix \(Timestamp.iso8601(milliseconds: ms)): no answer within 30 s")
                #expect(reply.hasPrefix("ok "), "fix \(Timestamp.iso8601(milliseconds: ms)): \(reply)")
            }
        }
        func delivered(_ label: String) async {
            let expected = ["ship": Set(sent)]
            async let traccarDelivered = world.server.waitForAll(expected, timeout: .seconds(20))
            async let gatewayDelivered = push.waitForAll(expected, timeout: .seconds(20))
            let (atTraccar, atGateway) = await (traccarDelivered, gatewayDelivered)
            #expect(
                atTraccar && atGateway,
                "\(label): Traccar \(atTraccar), gateway \(atGateway); the relay said:\n\(relay.stderrText().suffix(4000))"
            )
        }

        try write(10)
        await delivered("before any step")
        let tokens = push.tokensIssued

        try step("+25h")
        try write(10)
        await delivered("after the clock went forward 25 h")
        #expect(
            push.tokensIssued == tokens, "the token was refreshed because the wall clock moved, not because 24 h passed"
        )
        #expect(Set(world.server.positions.map(\.fixTimeMs)) == Set(sent), "fix times are the collector's")

        // 28 h back: the relay's clock is now 3 h behind the collector's.
        try step("-3h")
        try write(10)
        #expect(relay.process.isRunning)
        #expect(push.problems.isEmpty, "\(push.problems)")
        try expectNoSecrets(world, relay: relay, push: push)
        print(
            "clock steps: relay clock +25 h then -28 h while running; \(sent.count) positions all answered ok, the first 20 delivered to both destinations with their own fix times, \(push.tokensIssued - tokens) token refreshes"
        )
    }
}

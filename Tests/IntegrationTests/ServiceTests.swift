import Foundation
import Glibc
import Testing
import GeoRelayCore
import GeoRelayTestKit

/// Running as a systemd service: the notify protocol, `georelay check`.
@Suite struct ServiceTests {
    @Test func tellsSystemdWhenReadyAliveAndStopping() async throws {
        let world = try RelayWorld()
        // A fake $NOTIFY_SOCKET: a datagram socket the relay writes its states to.
        let path = world.directory.file("notify.sock")
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        #expect(withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } } == 0)
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        func next() -> String {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : ""
        }
        let relay = try RelayProcess(configPath: world.configPath, socketPath: world.socketPath, directory: world.directory.path,
                                     environment: ["NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"])
        let first = next()
        #expect(first.hasPrefix("READY=1"))
        #expect(next() == "WATCHDOG=1" || first.contains("WATCHDOG"))
        relay.signal(SIGTERM)
        var stopping = false
        for _ in 0..<10 where !stopping { stopping = next() == "STOPPING=1" }
        #expect(stopping)
    }

    @Test func checkPrintsEffectiveValuesWithSecretsMasked() throws {
        let world = try RelayWorld()
        try world.writeConfig(moreDestinations: """
            { name: "gw", type: "push", url: "https://gw.example.com/p", tenant: "acme", username: "alice",
              auth: { mode: "token", token: "super-secret-token" } },
            """)
        let result = try world.command(["check"])
        #expect(result.status == 0)
        #expect(result.stdout.contains(#""token": "<secret>""#))
        #expect(!result.stdout.contains("super-secret-token"))
        #expect(result.stdout.contains(#""distanceMeters": 50"#))
        try "{ spool: { whenFull: 'never' } }".write(toFile: world.configPath, atomically: true, encoding: .utf8)
        let bad = try world.command(["check"])
        #expect(bad.status == 78)
        #expect(bad.stderr.contains("spool.whenFull"))
    }
}

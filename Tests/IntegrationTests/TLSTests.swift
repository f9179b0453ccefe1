import Foundation
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Testing

/// A self-signed HTTPS server in front of the fake Traccar server: a certificate made by
/// `openssl` for 127.0.0.1 and a TLS-terminating proxy (`Tests/Helpers/tls_proxy.py`).
final class SelfSignedServer {
    let directory: TemporaryDirectory
    let certificate: String
    let port: Int
    private let proxy = Process()
    private var stopped = false

    init(targetPort: Int) throws {
        directory = try TemporaryDirectory()
        certificate = directory.file("cert.pem")
        let openssl = try RelayProcess.run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", directory.file("key.pem"), "-out", certificate, "-days", "2",
                "-subj", "/CN=georelay-test", "-addext", "subjectAltName=IP:127.0.0.1",
            ])
        guard openssl.status == 0 else {
            throw RelayProcessError(message: "openssl could not make a certificate: \(openssl.stderr)")
        }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Helpers/tls_proxy.py").path
        proxy.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        proxy.arguments = [script, certificate, directory.file("key.pem"), String(targetPort)]
        let out = Pipe()
        proxy.standardOutput = out
        // Not the test's own stderr: swift test waits for EOF on it, which a live child would hold off.
        proxy.standardError = FileHandle.nullDevice
        try TestEnvironment.launch(proxy)
        // The proxy prints its ephemeral port once it listens (read with read(2): a line, not EOF).
        var text = ""
        var byte: UInt8 = 0
        while !text.hasSuffix("\n"), read(out.fileHandleForReading.fileDescriptor, &byte, 1) == 1 {
            text.append(Character(UnicodeScalar(byte)))
        }
        guard let port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw RelayProcessError(message: "tls_proxy.py did not start: \(text)")
        }
        self.port = port
    }

    var url: String { "https://127.0.0.1:\(port)/" }

    /// Not waited for: Foundation reaps it. Called from the test (`defer`), which also keeps the
    /// server alive to the end: Swift may otherwise release it right after its last use.
    func stop() {
        guard !stopped else { return }
        stopped = true
        kill(proxy.processIdentifier, SIGKILL)
    }

    deinit { stop() }
}

/// Security checks: TLS certificates are verified by default; a self-signed
/// server is trusted only when the destination names its CA (`caFile`); `insecure: true`
/// exists, works, and says so loudly in the log.
@Suite(.offThePool) struct TLSTests {
    @Test func aSelfSignedServerIsRefusedByDefault() async throws {
        let world = try RelayWorld()
        let tls = try SelfSignedServer(targetPort: world.server.http.port)
        defer { tls.stop() }
        try world.writeConfig(traccarURL: tls.url)
        try world.start()
        let client = try world.client()
        try client.write(line("a", 0))
        #expect(client.readLine() == "ok 1")
        let status = try await world.waitForStatus {
            $0["destinations"]?.array?.first?["lastError"]?.string?.contains("certificate") == true
        }
        let lastError = status["destinations"]?.array?.first?["lastError"]?.string ?? ""
        #expect(lastError.contains("certificate"), "\(lastError)")
        #expect(world.server.positions.isEmpty, "a position went to a server whose certificate nobody vouched for")
        #expect(try world.statusJSON()["destinations"]?.array?.first?["pending"]?.number == 1)
    }

    @Test func namingTheCAWithCAFileTrustsIt() async throws {
        let world = try RelayWorld()
        let tls = try SelfSignedServer(targetPort: world.server.http.port)
        defer { tls.stop() }
        try world.writeConfig(destination: #"caFile: "\#(tls.certificate)","#, traccarURL: tls.url)
        let relay = try world.start()
        let client = try world.client()
        try client.write(line("a", 0))
        #expect(client.readLine() == "ok 1")
        #expect(await world.server.waitUntil { $0.count == 1 })
        #expect(!relay.stderrText().contains("verification is OFF"))
    }

    @Test func insecureWorksAndIsLoud() async throws {
        let world = try RelayWorld()
        let tls = try SelfSignedServer(targetPort: world.server.http.port)
        defer { tls.stop() }
        try world.writeConfig(destination: "insecure: true,", traccarURL: tls.url)
        let relay = try world.start()
        let client = try world.client()
        try client.write(line("a", 0))
        #expect(client.readLine() == "ok 1")
        #expect(await world.server.waitUntil { $0.count == 1 })
        #expect(relay.stderrText().contains("TLS certificate verification is OFF"), "\(relay.stderrText())")
    }
}

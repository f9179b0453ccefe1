import GeoRelayCore
import GeoRelayForward
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

/// `CurlConnection` over TLS, through the self-signed proxy of `TLSTests`: curl does the
/// handshake and the certificate checks with the same options as `CurlEasy`, and pipelined
/// requests go through the encrypted connection in order.
@Suite(.offThePool) struct CurlConnectionTLSTests {
    @Test func pipelinesOverTLSVerifiedAgainstTheCAFile() throws {
        let server = try HTTPTestServer { HTTPTestResponse(status: 200, body: $0.body) }
        defer { server.stop() }
        let tls = try SelfSignedServer(targetPort: server.port)
        defer { tls.stop() }
        var settings = Configuration.TLSSettings()
        settings.caFile = tls.certificate
        let connection = try CurlConnection(url: tls.url, tls: settings, connectTimeoutSeconds: 5)
        try connection.connect()

        let target = try HTTP1Target(url: tls.url)
        #expect(target.isTLS)
        let request = try HTTP1Request(target: target)
        var out: [UInt8] = []
        for n in 0..<20 { request.append(body: Array("seq=\(n)".utf8), to: &out) }
        let exchange = PipelinedExchange(on: connection, sending: out, expecting: 20)

        #expect(exchange.end == .open)
        #expect(
            exchange.responses.map { String(decoding: $0.response.body, as: UTF8.self) } == (0..<20).map { "seq=\($0)" }
        )
        #expect(server.connectionsAccepted == 1, "one TLS connection, so one upstream connection from the proxy")
        #expect(connection.bytesSent == out.count)
    }

    @Test func refusesTheSelfSignedServerWithoutTheCAFile() throws {
        let server = try HTTPTestServer { _ in HTTPTestResponse(status: 200) }
        defer { server.stop() }
        let tls = try SelfSignedServer(targetPort: server.port)
        defer { tls.stop() }
        let connection = try CurlConnection(url: tls.url, connectTimeoutSeconds: 5)
        let error = #expect(throws: CurlError.self) { try connection.connect() }
        #expect(error?.message.contains("certificate") == true, "\(error.map { "\($0)" } ?? "")")
        #expect(server.connectionsAccepted == 0)
    }
}

import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

@Suite(.offThePool) struct PushSettingsTests {
    let login =
        #"type: "push", url: "https://gw.example.com/push", authBaseUrl: "https://auth.example.com/", registrationBaseUrl: "https://reg.example.com/", apiKey: "k", clientId: "c", tenant: "acme""#

    @Test func loginModeParsesWithDefaults() throws {
        let config = try Configuration.parse("{destinations: [{\(login), username: \"alice\"}]}")
        let destination = config.destinations[0]
        #expect(destination.kind == .push)
        #expect(destination.name == "push")
        #expect(destination.filter.distanceMeters == 50)
        let push = try #require(destination.push)
        #expect(push.registrationBaseURL == "https://reg.example.com/")
        #expect(push.authMode == .login)
        #expect(push.batchMaxPositions == 500)
        #expect(push.batchMaxBytes == 262_144)
        #expect(push.batchMaxDelaySeconds == 5)
        #expect(push.batchInFlight == 8)
        #expect(push.compression == .zstd)
        #expect(push.tokenRefreshSeconds == 86_400)
    }

    @Test(arguments: [
        (
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", auth: {mode: "token", token: "x"}}]}"#,
            "destinations[0].username: USERNAME_REQUIRED"
        ),
        (
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", username: "u", auth: {mode: "token"}}]}"#,
            "destinations[0].auth.token: CALLER_ACCESS_TOKEN_REQUIRED"
        ),
        (
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", username: "u", auth: {mode: "token", token: " "}}]}"#,
            "destinations[0].auth.token: CALLER_ACCESS_TOKEN_REQUIRED"
        ),
        (
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", username: "u", auth: {mode: "token", token: "x"}, filter: {distanceMeters: -5}}]}"#,
            "destinations[0].filter.distanceMeters: INVALID_DISTANCE_FILTER"
        ),
        (
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", username: "u", auth: {mode: "token", token: "x"}, filter: {distanceMeters: "far"}}]}"#,
            "destinations[0].filter.distanceMeters: INVALID_DISTANCE_FILTER"
        ),
        (
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "", username: "u", auth: {mode: "token", token: "x"}}]}"#,
            "destinations[0].tenant: CONFIGURATION_ERROR"
        ),
        (
            #"{destinations: [{type: "push", tenant: "t", username: "u", auth: {mode: "token", token: "x"}}]}"#,
            "destinations[0].url: CONFIGURATION_ERROR"
        ),
        (
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", username: "u"}]}"#,
            "destinations[0].authBaseUrl: CONFIGURATION_ERROR"
        ),
        (
            #"{destinations: [{type: "push", url: "https://gw/p", authBaseUrl: "https://a/", registrationBaseUrl: "https://r/", clientId: "c", tenant: "t", username: "u"}]}"#,
            "destinations[0].apiKey: CONFIGURATION_ERROR"
        ),
        (
            #"{destinations: [{type: "push", url: "https://gw/p", authBaseUrl: "https://a/", registrationBaseUrl: "https://r/", clientId: "c", apiKey: "", tenant: "t", username: "u"}]}"#,
            "destinations[0].apiKey: CONFIGURATION_ERROR"
        ),
    ])
    func validationUsesTheSDKCodes(text: String, prefix: String) {
        check(text, prefix: prefix)
    }

    /// Batches on the wire at once: 1 (one a round trip) to 64.
    @Test(arguments: [0, 65, -1])
    func batchesInFlightAreBounded(value: Int) {
        check(
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", username: "u", auth: {mode: "token", token: "x"}, batch: {inFlight: \#(value)}}]}"#,
            prefix: "destinations[0].batch.inFlight: ")
    }

    @Test func oneBatchInFlightIsAllowed() throws {
        let config = try Configuration.parse(
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", username: "u", auth: {mode: "token", token: "x"}, batch: {inFlight: 1}}]}"#
        )
        #expect(config.destinations[0].push?.batchInFlight == 1)
    }

    private func check(_ text: String, prefix: String) {
        do {
            _ = try Configuration.parse(text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.description.hasPrefix(prefix), "\(error.description)")
        }
    }

    @Test func tokenModeNeedsOnlyUrlTenantUsernameAndToken() throws {
        let config = try Configuration.parse(
            #"{destinations: [{type: "push", url: "https://gw/p", tenant: "t", username: "u", auth: {mode: "token", token: {file: "/run/token"}}}]}"#
        )
        #expect(config.destinations[0].push?.token?.source == .file("/run/token"))
    }

    @Test func encodingsWeakenZstdGzipNone() {
        #expect(PushSettings.Compression.zstd.weaker == PushSettings.Compression.gzip)
        #expect(PushSettings.Compression.gzip.weaker == PushSettings.Compression.none)
        #expect(PushSettings.Compression.none.weaker == nil)
    }
}

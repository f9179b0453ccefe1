import Foundation
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

/// A configuration file that holds a secret in plain text and that every user can read is worth a
/// warning at start and in `georelay check`; one that keeps its secrets elsewhere, or that only
/// its owner and group can read, is not.
@Suite(.offThePool) struct ConfigurationExposureTests {
    static let pushWithLiteralKey = #"""
        { destinations: [{ type: "push", url: "https://gw.example.org/push", apiKey: "k-123", clientId: "c", tenant: "t", username: "u", authBaseUrl: "https://auth.example.org/", registrationBaseUrl: "https://reg.example.org/" }] }
        """#

    func write(_ text: String, mode: Int, in directory: TemporaryDirectory) throws -> String {
        let path = directory.file("georelay.json5")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        return path
    }

    @Test func aWorldReadableFileWithALiteralKeyIsWarnedAboutByName() throws {
        let directory = try TemporaryDirectory()
        let path = try write(Self.pushWithLiteralKey, mode: 0o644, in: directory)
        let warning = try #require(try Configuration.load(path: path).exposureWarning(path: path))
        #expect(warning.contains("destinations[0].apiKey"))
        #expect(warning.contains("644"))
        #expect(!warning.contains("k-123"), "the warning must not show the secret")
    }

    @Test(arguments: [
        (pushWithLiteralKey, 0o640),
        (
            #"{ destinations: [{ type: "push", url: "https://gw.example.org/push", apiKey: { env: "KEY" }, clientId: "c", tenant: "t", username: "u", authBaseUrl: "https://auth.example.org/", registrationBaseUrl: "https://reg.example.org/" }] }"#,
            0o644
        ),
        (#"{ destinations: [{ url: "http://traccar.example.org:5055" }] }"#, 0o644),
    ])
    func noWarningWhenTheSecretIsElsewhereOrTheFileIsPrivate(text: String, mode: Int) throws {
        let directory = try TemporaryDirectory()
        let path = try write(text, mode: mode, in: directory)
        #expect(try Configuration.load(path: path).exposureWarning(path: path) == nil)
    }

    @Test func credentialsInAURLCount() throws {
        let directory = try TemporaryDirectory()
        let path = try write(
            #"{ destinations: [{ url: "https://relay:s3cret@traccar.example.org/" }] }"#, mode: 0o604, in: directory)
        let warning = try #require(try Configuration.load(path: path).exposureWarning(path: path))
        #expect(warning.contains("destinations[0].url"))
        #expect(!warning.contains("s3cret"))
    }
}

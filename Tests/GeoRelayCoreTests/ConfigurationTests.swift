import Foundation
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

@Suite(.offThePool) struct ConfigurationTests {
    @Test func emptyObjectGivesDefaults() throws {
        let config = try Configuration.parse("{}")
        #expect(config.spool.path == "spool/georelay.db")
        #expect(config.ingest.socket == "spool/georelay.sock")
        #expect(config.ingest.maxLineBytes == 8192)
        #expect(config.destinations.count == 1)
        #expect(config.destinations[0].url == "http://127.0.0.1:5055")
        #expect(config.destinations[0].backoffMinSeconds == 5)
        #expect(config.destinations[0].backoffMaxSeconds == 300)
        #expect(config.spool.whenFull == .dropOldest)
        // Certificates are verified unless a destination says otherwise in so many words.
        #expect(config.destinations[0].tls == Configuration.TLSSettings())
        #expect(!config.destinations[0].tls.insecure)
    }

    /// The integrity watch's settings reach every vessel, its antennas' separation its own.
    @Test func integritySettingsReachEachDevice() throws {
        let config = try Configuration.parse(
            #"{integrity: {maxSpeedKnots: 40, clearSeconds: 120}, devices: [{id: "boat", sources: ["a", "b"], separationMetres: 12}, {id: "dinghy", sources: ["c"]}]}"#
        )
        #expect(config.devices.map(\.integrity.separationMetres) == [12, nil])
        #expect(
            config.devices.allSatisfy { $0.integrity.clearSeconds == 120 && abs($0.integrity.maxSpeed - 20.58) < 0.01 })
        #expect(
            try Configuration.parse(#"{integrity: {enabled: false}, devices: [{id: "boat", sources: ["a"]}]}"#)
                .devices[0].integrity.enabled == false)
    }

    @Test func shippedConfigParses() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let config = try Configuration.load(path: root.appendingPathComponent("config/georelay.json5").path)
        #expect(config == (try Configuration.parse("{}")))
    }

    @Test(arguments: [
        (#"{destinations: [{url: 5}]}"#, "destinations[0].url: expected a string, got a number"),
        (#"{destinations: [{}, {name: "b", urll: "x"}]}"#, "destinations[1].urll: unknown key"),
        (#"{spool: {maxBytes: "big"}}"#, "spool.maxBytes: expected a number, got a string"),
        (#"{spool: {whenFull: "panic"}}"#, #"spool.whenFull: expected one of "drop-oldest", "reject", got "panic""#),
        (#"{ingest: {maxLineBytes: 10}}"#, "ingest.maxLineBytes: must be at least 256, got 10"),
        (
            #"{destinations: [{url: "ftp://x"}]}"#,
            "destinations[0].url: expected an http:// or https:// URL with a host"
        ),
        (#"{destinations: [{}, {}]}"#, #"destinations[1].name: duplicate destination name "traccar""#),
        (
            #"{destinations: [{backoff: {minSeconds: 10, maxSeconds: 5}}]}"#,
            "destinations[0].backoff.maxSeconds: must be at least 10, got 5"
        ),
        (#"{destinations: [{concurrency: 2.5}]}"#, "destinations[0].concurrency: expected a whole number, got 2.5"),
        (#"{spol: {}}"#, "spol: unknown key"),
        // Meant as "never": refused at load, naming the key, instead of trapping at run time.
        (
            #"{destinations: [{unknownDeviceRetrySeconds: 1e99}]}"#,
            "destinations[0].unknownDeviceRetrySeconds: must be at most 604800, got 1e+99"
        ),
        (#"{spool: {retainHours: 1e13}}"#, "spool.retainHours: must be at most 87600, got 10000000000000"),
        (
            #"{destinations: [{filter: {intervalSeconds: 1e300}}]}"#,
            "destinations[0].filter.intervalSeconds: expected a number, 0 or more, got a number outside 0...1e12"
        ),
        (#"[]"#, "expected an object, got an array"),
        (
            #"{devices: [{id: "boat", sources: ["a", "a"]}]}"#,
            #"devices[0].sources[1]: "a" is already a source or is the device itself"#
        ),
        (
            #"{devices: [{id: "boat", sources: []}]}"#,
            "devices[0].sources: expected a list of source device ids, best first"
        ),
        (
            #"{devices: [{id: "boat", sources: ["a"]}, {id: "a", sources: ["b"]}]}"#,
            #"devices: "a" is both a device and a source"#
        ),
        (
            #"{destinations: [{caFile: "/nonexistent/ca.pem"}]}"#,
            "destinations[0].caFile: cannot read the CA file /nonexistent/ca.pem"
        ),
        (#"{destinations: [{insecure: "yes"}]}"#, "destinations[0].insecure: expected true or false, got a string"),
        (#"{integrity: {maxSpeedKnots: 2}}"#, "integrity.maxSpeedKnots: must be at least 5, got 2"),
        (#"{integrity: {clearSecs: 2}}"#, "integrity.clearSecs: unknown key"),
        (
            #"{devices: [{id: "boat", sources: ["a"], separationMetres: -3}]}"#,
            "devices[0].separationMetres: must be at least 0, got -3"
        ),
        (
            #"{destinations: [{url: "http://127.0.0.1:5055"}], ingest: {http: {listen: "0.0.0.0:5055"}}}"#,
            "destinations[0].url: points at this relay's own phone listener (ingest.http.listen 0.0.0.0:5055): positions would loop"
        ),
    ])
    func errorsNameTheKeyPath(text: String, message: String) {
        do {
            _ = try Configuration.parse(text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.description == message)
        }
    }

    /// `protocol` chooses how a Traccar destination carries positions; OsmAnd stays the default.
    @Test(arguments: [
        (
            #"{destinations: [{protocol: "teltonika", url: "tcp://traccar.example.org:5027"}]}"#,
            "tcp://traccar.example.org:5027"
        ),
        (
            #"{destinations: [{protocol: "teltonika", url: "tls://traccar.example.org:5443/"}]}"#,
            "tls://traccar.example.org:5443/"
        ),
        (#"{destinations: [{protocol: "teltonika", url: "tcp://10.0.0.2"}]}"#, "tcp://10.0.0.2"),
        (#"{destinations: [{protocol: "teltonika"}]}"#, "tcp://127.0.0.1:5027"),
    ])
    func teltonikaTakesATCPOrTLSURL(text: String, url: String) throws {
        let destination = try Configuration.parse(text).destinations[0]
        #expect(destination.kind == .traccar && destination.traccarProtocol == .teltonika)
        #expect(destination.url == url)
        // What `georelay check` prints.
        let effective = try Configuration.parse(text).effective.jsonText
        #expect(effective.contains(#""protocol":"teltonika""#), "\(effective)")
    }

    /// One connection per device: every device of a round sends at once unless told otherwise.
    @Test func teltonikaSendsEveryDeviceAtOnceByDefault() throws {
        #expect(
            try Configuration.parse(#"{destinations: [{protocol: "teltonika"}]}"#).destinations[0].concurrency == 64)
        #expect(
            try Configuration.parse(#"{destinations: [{protocol: "teltonika", concurrency: 4}]}"#).destinations[0]
                .concurrency == 4)
        #expect(try Configuration.parse(#"{destinations: [{type: "traccar"}]}"#).destinations[0].concurrency == 4)
        let probe = try Configuration.parse(#"{destinations: [{probe: {connectSeconds: 0}}]}"#).destinations[0]
        #expect(probe.probeConnectSeconds == 0)
        #expect(throws: ConfigError.self) {
            try Configuration.parse(#"{destinations: [{probe: {connectSeconds: -1}}]}"#)
        }
    }

    @Test func osmAndStaysTheDefault() throws {
        let destination = try Configuration.parse(#"{destinations: [{type: "traccar"}]}"#).destinations[0]
        #expect(destination.traccarProtocol == .osmand && destination.url == "http://127.0.0.1:5055")
    }

    @Test(arguments: [
        (
            #"{destinations: [{protocol: "teltonika", url: "http://traccar.example.org:5055"}]}"#,
            #"destinations[0].url: protocol "teltonika" speaks TCP to Traccar's Teltonika port: use tcp://host:5027 or tls://host:port; http:// and https:// URLs are for protocol "osmand""#
        ),
        (
            #"{destinations: [{protocol: "teltonika", url: "https://traccar.example.org"}]}"#,
            #"destinations[0].url: protocol "teltonika" speaks TCP to Traccar's Teltonika port: use tcp://host:5027 or tls://host:port; http:// and https:// URLs are for protocol "osmand""#
        ),
        (
            #"{destinations: [{protocol: "teltonika", url: "tcp://host:5027/path"}]}"#,
            "destinations[0].url: expected a tcp://host:port or tls://host:port URL for the Teltonika protocol"
        ),
        (
            #"{destinations: [{protocol: "osmand", url: "tcp://host:5027"}]}"#,
            "destinations[0].url: expected an http:// or https:// URL with a host"
        ),
        (
            #"{destinations: [{protocol: "gt06"}]}"#,
            #"destinations[0].protocol: expected one of "osmand", "teltonika", got "gt06""#
        ),
    ])
    func teltonikaURLsAreCheckedWithAClearMessage(text: String, message: String) {
        do {
            _ = try Configuration.parse(text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.description == message)
        }
    }

    @Test func syntaxErrorsGiveLineAndColumn() {
        do {
            _ = try Configuration.parse("{\n  spool: {\n    path: 'x' 'y'\n  }\n}")
            Issue.record("accepted")
        } catch {
            #expect(error.description.contains("line 3"))
        }
    }

    @Test func secretsFromLiteralEnvironmentAndFile() throws {
        var node = try ConfigNode(
            try JSONParser.parse(
                #"{"a": "lit", "b": {"env": "GEORELAY_TEST_SECRET_B"}, "c": {"file": "/nonexistent/x"}, "d": {"env": "X", "file": "Y"}}"#
            ))
        let a = try #require(try node.secret("a"))
        #expect(try a.reveal() == "lit")
        #expect(a.description == "<secret>")
        TestEnvironment.set("GEORELAY_TEST_SECRET_B", "  s3cret\n")
        let b = try #require(try node.secret("b"))
        #expect(try b.reveal() == "s3cret")
        #expect(!b.description.contains("s3cret"))
        let c = try #require(try node.secret("c"))
        #expect(throws: ConfigError.self) { try c.reveal() }
        #expect(throws: ConfigError.self) { try node.secret("d") }
    }

    @Test func fileSecretIsReadAgainEachTime() throws {
        let path = NSTemporaryDirectory() + "georelay-secret-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try "one\n".write(toFile: path, atomically: true, encoding: .utf8)
        let secret = Secret(.file(path), path: "destinations[0].apiKey")
        #expect(try secret.reveal() == "one")
        try "two".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try secret.reveal() == "two")
        #expect(!secret.description.contains("one") && !secret.description.contains("two"))
    }

    @Test func redactsCredentialsInURLs() {
        #expect(Redaction.url("https://user:pass@example.com/path?key=abc") == "https://***@example.com/path?***")
        #expect(Redaction.url("http://127.0.0.1:5055") == "http://127.0.0.1:5055")
    }
}

import Foundation
import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

/// `ui.listen`, the status page's address: off by default, checked when set.
@Suite(.offThePool) struct ConfigurationUITests {
    @Test func offByDefaultAndReadWhenSet() throws {
        #expect(try Configuration.parse("{}").uiListen == nil)
        #expect(try Configuration.parse(#"{ui: {listen: "0.0.0.0:8080"}}"#).uiListen == "0.0.0.0:8080")
        #expect(try Configuration.parse(#"{ui: {listen: ":8080"}}"#).uiListen == ":8080")
        // One listener serves both when they are the same address.
        let shared = try Configuration.parse(#"{ui: {listen: "127.0.0.1:9105"}, metrics: {listen: "127.0.0.1:9105"}}"#)
        #expect(shared.uiListen == shared.metricsListen)
    }

    @Test(arguments: [
        (#"{ui: {listen: 8080}}"#, "ui.listen: expected a string, got a number"),
        (#"{ui: {listen: "8080"}}"#, #"ui.listen: expected HOST:PORT, e.g. "0.0.0.0:8080", got "8080""#),
        (
            #"{ui: {listen: "0.0.0.0:80800"}}"#,
            #"ui.listen: expected a port from 1 to 65535 after the colon, got "80800""#
        ),
        (#"{ui: {listen: "0.0.0.0:0"}}"#, #"ui.listen: expected a port from 1 to 65535 after the colon, got "0""#),
        (
            #"{ui: {listen: "boat.local:8080"}}"#,
            #"ui.listen: expected an IPv4 address (or nothing, for every interface) before the colon, got "boat.local""#
        ),
        (#"{ui: {listen: "0.0.0.0:8080", port: 1}}"#, "ui.port: unknown key"),
        (#"{ui: "on"}"#, "ui: expected an object, got a string"),
        (
            #"{ui: {listen: "0.0.0.0:5055"}, ingest: {http: {listen: "0.0.0.0:5055"}}}"#,
            "ui.listen: 0.0.0.0:5055 is the phone listener's (ingest.http.listen): the page needs a port of its own, or metrics.listen's"
        ),
    ])
    func badAddressesNameTheKey(text: String, message: String) {
        do {
            _ = try Configuration.parse(text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.description == message)
        }
    }
}

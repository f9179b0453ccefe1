import Foundation
import GeoRelayTestTraits
import Testing
@testable import GeoRelayCore

/// `uplinks`: the box's links by interface; none configured changes nothing.
@Suite(.offThePool) struct ConfigurationUplinkTests {
    @Test func noneByDefaultAndReadWhenSet() throws {
        #expect(try Configuration.parse("{}").uplinks.isEmpty)
        let config = try Configuration.parse(#"{uplinks: [{name: "starlink", interface: "eth1"}, {name: "iridium", interface: "ppp0", metered: true}]}"#)
        #expect(config.uplinks == [Configuration.Uplink(name: "starlink", interface: "eth1"),
                                   Configuration.Uplink(name: "iridium", interface: "ppp0", metered: true)])
    }

    @Test(arguments: [
        (#"{uplinks: [{interface: "eth1"}]}"#, "uplinks[0].name: an uplink needs a name"),
        (#"{uplinks: [{name: "a"}]}"#, #"uplinks[0].interface: "" is not a network interface name (up to 15 characters, no '/' or spaces)"#),
        (#"{uplinks: [{name: "a", interface: "a-very-long-interface"}]}"#,
         #"uplinks[0].interface: "a-very-long-interface" is not a network interface name (up to 15 characters, no '/' or spaces)"#),
        (#"{uplinks: [{name: "a", interface: "eth1"}, {name: "a", interface: "eth2"}]}"#, #"uplinks[1].name: duplicate uplink name "a""#),
        (#"{uplinks: [{name: "a", interface: "eth1"}, {name: "b", interface: "eth1"}]}"#, #"uplinks[1].interface: interface eth1 is already uplink "a""#),
        (#"{uplinks: [{name: "a", interface: "eth1", budget: 1}]}"#, "uplinks[0].budget: unknown key"),
        (#"{uplinks: [{name: "a", interface: "eth1", metered: "yes"}]}"#, "uplinks[0].metered: expected true or false, got a string"),
    ])
    func badUplinksSayWhatAndWhere(text: String, message: String) {
        #expect {
            try Configuration.parse(text)
        } throws: { error in
            "\(error)" == message
        }
    }
}

import Foundation
import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

/// `uplinks`: the box's links by interface; none configured changes nothing.
@Suite(.offThePool) struct ConfigurationUplinkTests {
    @Test func noneByDefaultAndReadWhenSet() throws {
        #expect(try Configuration.parse("{}").uplinks.isEmpty)
        let config = try Configuration.parse(
            #"{uplinks: [{name: "starlink", interface: "eth1"}, {name: "iridium", interface: "ppp0", metered: true}]}"#)
        #expect(
            config.uplinks == [
                Configuration.Uplink(name: "starlink", interface: "eth1"),
                Configuration.Uplink(name: "iridium", interface: "ppp0", metered: true),
            ])
        let budgeted = try Configuration.parse(
            #"{uplinks: [{name: "iridium", interface: "ppp0", budget: {dayBytes: 100000}}, {name: "cell", interface: "wwan0", budget: {dayBytes: 5000000, monthBytes: 50000000}}]}"#
        )
        #expect(
            budgeted.uplinks.map(\.budget) == [
                Configuration.Budget(dayBytes: 100_000),
                Configuration.Budget(dayBytes: 5_000_000, monthBytes: 50_000_000),
            ])
        let budget = Configuration.Budget(dayBytes: 100, monthBytes: 1_000)
        #expect(
            !budget.isSpent(today: 99, month: 500) && budget.isSpent(today: 100, month: 500)
                && budget.isSpent(today: 0, month: 1_000))
        // The still-alive minimum: 15 minutes unless said.
        #expect(budgeted.uplinks[0].send.minIntervalSeconds == 900)
        let sending = try Configuration.parse(
            #"{uplinks: [{name: "iridium", interface: "ppp0", budget: {dayBytes: 100000}, send: {minIntervalSeconds: 1800}}]}"#
        )
        #expect(sending.uplinks[0].send == Configuration.Send(minIntervalSeconds: 1800))
        let latest = try Configuration.parse(
            #"{uplinks: [{name: "iridium", interface: "ppp0", send: {latestSeconds: 300}}]}"#)
        #expect(latest.uplinks[0].send == Configuration.Send(latestSeconds: 300))
    }

    @Test(arguments: [
        (#"{uplinks: [{interface: "eth1"}]}"#, "uplinks[0].name: an uplink needs a name"),
        (
            #"{uplinks: [{name: "a"}]}"#,
            #"uplinks[0].interface: "" is not a network interface name (up to 15 characters, no '/' or spaces)"#
        ),
        (
            #"{uplinks: [{name: "a", interface: "a-very-long-interface"}]}"#,
            #"uplinks[0].interface: "a-very-long-interface" is not a network interface name (up to 15 characters, no '/' or spaces)"#
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1"}, {name: "a", interface: "eth2"}]}"#,
            #"uplinks[1].name: duplicate uplink name "a""#
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1"}, {name: "b", interface: "eth1"}]}"#,
            #"uplinks[1].interface: interface eth1 is already uplink "a""#
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", budget: 1}]}"#,
            "uplinks[0].budget: expected an object, got a number"
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", budget: {}}]}"#,
            "uplinks[0].budget: a budget needs dayBytes, monthBytes or both"
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", budget: {dayBytes: 0}}]}"#,
            "uplinks[0].budget.dayBytes: must be at least 1, got 0"
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", budget: {monthBytes: 1.5}}]}"#,
            "uplinks[0].budget.monthBytes: expected a whole number, got 1.5"
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", budget: {dayBytes: 10, weekBytes: 5}}]}"#,
            "uplinks[0].budget.weekBytes: unknown key"
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", metered: "yes"}]}"#,
            "uplinks[0].metered: expected true or false, got a string"
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", send: {minIntervalSeconds: 0}}]}"#,
            "uplinks[0].send.minIntervalSeconds: must be at least 1, got 0"
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", send: {interval: 60}}]}"#,
            "uplinks[0].send.interval: unknown key"
        ),
        (
            #"{uplinks: [{name: "a", interface: "eth1", send: {latestSeconds: 0.5}}]}"#,
            "uplinks[0].send.latestSeconds: must be at least 1, got 0.5"
        ),
    ])
    func badUplinksSayWhatAndWhere(text: String, message: String) {
        #expect {
            try Configuration.parse(text)
        } throws: { error in
            "\(error)" == message
        }
    }
}

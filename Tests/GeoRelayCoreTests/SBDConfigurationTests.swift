import GeoRelayCore
import GeoRelayTestTraits
import Testing

/// `sbd` aboard and `ingest.sbd` ashore: defaults, and every wrong value refused with its key.
@Suite(.offThePool) struct SBDConfigurationTests {
    @Test func theModemAboardTakesItsDefaultsAndEveryDestination() throws {
        let config = try Configuration.parse(#"{ sbd: { device: "/dev/ttyUSB0", units: ["bow", "mob"] } }"#)
        let sbd = try #require(config.sbd)
        #expect(sbd.baud == 19200 && !sbd.flowControl && sbd.units == ["bow", "mob"] && sbd.relayID == 0)
        #expect(sbd.destinations == config.destinations.map(\.name))
        #expect(sbd.fallbackSeconds == 600 && sbd.alarmGraceSeconds == 30 && sbd.intervalSeconds == 900)
        #expect(sbd.dailyCredits == 120 && sbd.monthlyCredits == 2000)
        #expect(try Configuration.parse("{}").sbd == nil)
    }

    @Test(arguments: [
        (#"{ sbd: { units: ["a"] } }"#, "sbd.device: expected the modem's serial device"),
        (#"{ sbd: { device: "/dev/x", units: [] } }"#, "sbd.units: expected 1 to 32 device ids"),
        (#"{ sbd: { device: "/dev/x", units: ["a", "a"] } }"#, "sbd.units[1]: a is listed twice"),
        (#"{ sbd: { device: "/dev/x", units: ["a"], baud: 1234 } }"#, "sbd.baud: unsupported baud rate 1234"),
        (#"{ sbd: { device: "/dev/x", units: ["a"], destinations: ["nope"] } }"#, "sbd.destinations[0]"),
        (#"{ sbd: { device: "/dev/x", units: ["a"], intervalSeconds: 10 } }"#, "sbd.intervalSeconds"),
        (#"{ sbd: { device: "/dev/x", units: ["a"], colour: 1 } }"#, "sbd.colour"),
        (#"{ ingest: { sbd: { directIP: "0.0.0.0:10800" } } }"#, "ingest.sbd.vessels: the DirectIP door"),
        (#"{ ingest: { sbd: { vessels: [{ imei: "12", units: ["a"] }] } } }"#, "ingest.sbd.vessels[0].imei"),
        (
            #"{ ingest: { sbd: { vessels: [{ imei: "300434063904790", units: ["a"] }, { imei: "300434063904790", units: ["b"] }] } } }"#,
            "listed twice"
        ),
    ])
    func wrongValuesAreRefusedWithTheirKey(text: String, message: String) {
        do {
            _ = try Configuration.parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect("\(error)".contains(message), "\(error)")
        }
    }
}

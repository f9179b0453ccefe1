import Foundation
import GeoRelayCore
import GeoRelayForward
import GeoRelaySpool
import GeoRelayTestKit
import Glibc
import Synchronization

/// The `nmea` figure.
func nmeaFigure() async throws {
    // A real receiver log replayed through the socket as fast as the relay answers, acks on.
    let log = SharedTestData.nmea.appendingPathComponent("telit-he910.log")
    if let data = try? Data(contentsOf: log) {
        let lines = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).filter {
            $0.hasPrefix("$")
        }.map(String.init)
        // The log over and over, each pass a day later so every fix is new.
        var payload: [String] = []
        for pass in 0..<(quick ? 20 : 100) {
            for line in lines {
                guard line.contains("RMC,"), var sentence = try? NMEASentence.parse(line), sentence.fields.count > 8,
                    let date = sentence.field(8), date.count == 6, let day = Int(date.prefix(2))
                else {
                    payload.append(line)
                    continue
                }
                sentence.fields[8] = Substring(String(format: "%02d", (day + pass) % 28 + 1) + date.dropFirst(2))
                let body = "\(sentence.talker)\(sentence.type)," + sentence.fields.joined(separator: ",")
                payload.append("$" + body + "*" + String(format: "%02X", body.utf8.reduce(UInt8(0)) { $0 ^ $1 }))
            }
        }
        let text = payload.map { $0 + "\r\n" }.joined()
        /// Lines a second through a relay, `topLevel` in its config.
        func rate(_ topLevel: String) throws -> Double {
            let relay = try BenchRelay(destinationURL: deadURL(), topLevel: topLevel)
            try relay.start()
            defer { relay.stop() }
            let client = try UnixLineClient(path: relay.socketPath)
            try client.write(#"{"hello":{"device":"telit","ack":true}}"# + "\n")
            _ = client.readLine()
            let started = WallClock.monotonicNs()
            Thread { try? client.write(text) }.start()
            _ = client.readLines(payload.count)
            return Double(payload.count) / (Double(WallClock.monotonicNs() - started) / 1e9)
        }
        emit(
            "nmea_lines_per_second",
            [
                ("value", .number(try rate("").rounded())), ("lines", .number(Double(payload.count))),
                ("log", .string("telit-he910.log")),
            ])
        // The receiver as a vessel's source, its integrity watch on and off, alternately: what the
        // watch costs the ingest path (target: within 5 %).
        let vessel = #"devices: [{ id: "vessel", sources: ["telit"] }], "#
        var on: [Double] = []
        var off: [Double] = []
        for _ in 0..<(quick ? 1 : 3) {
            off.append(try rate(vessel + "integrity: { enabled: false }, "))
            on.append(try rate(vessel))
        }
        let median = { (values: [Double]) in values.sorted()[values.count / 2] }
        emit(
            "nmea_integrity_cost",
            [
                ("watched_lines_per_second", .number(median(on).rounded())),
                ("unwatched_lines_per_second", .number(median(off).rounded())),
                ("ratio", .number((median(on) / median(off) * 1000).rounded() / 1000)),
                ("runs", .number(Double(on.count))),
                ("target", .string("ratio >= 0.95")),
            ])
    } else {
        note("../shared/testdata/nmea is absent: nmea figure skipped")
    }
    // A collector's CPU for one 1 Hz receiver (a TCP multiplexer sending one RMC+GGA cycle a second).
    let relay = try BenchRelay(destinationURL: deadURL())
    try relay.start()
    let mux = try LineServer()
    let collector = Process()
    collector.executableURL = URL(fileURLWithPath: binDirectory + "/georelay")
    collector.arguments = [
        "collect", "--device", "bow", "--tcp", "127.0.0.1:\(mux.port)", "--socket", relay.socketPath, "--log-level",
        "warning",
    ]
    collector.standardError = FileHandle.nullDevice
    try collector.run()
    let seconds = quick ? 10 : 30
    _ = await mux.waitForClient()
    let before = cpuSeconds(collector.processIdentifier)
    for second in 0..<seconds {
        func sentence(_ body: String) -> String {
            "$" + body + "*" + String(format: "%02X", body.utf8.reduce(UInt8(0)) { $0 ^ $1 })
        }
        let time = String(format: "12%02d%02d.00", second / 60, second % 60)
        mux.send([
            sentence("GPRMC,\(time),A,5930.000,N,01042.000,E,005.0,090.0,250726,,,A"),
            sentence("GPGGA,\(time),5930.000,N,01042.000,E,1,09,0.8,12.0,M,20.0,M,,"),
            sentence("GPGSV,1,1,01,01,40,083,46"),
        ])
        usleep(1_000_000)
    }
    let used = cpuSeconds(collector.processIdentifier) - before
    collector.terminate()
    collector.waitUntilExit()
    mux.stop()
    relay.stop()
    emit(
        "collector_cpu_percent_per_1hz_receiver",
        [
            ("value", .number((used / Double(seconds) * 100 * 1000).rounded() / 1000)),
            ("window_seconds", .number(Double(seconds))), ("target", .string("a handful together < 1")),
        ])
}

import Foundation
import GeoRelayTestKit
import GeoRelayTestTraits
import Testing

@testable import GeoRelayCore

let nmeaLogs = SharedTestData.nmea
let haveNMEALogs = SharedTestData.haveNMEA

/// Feeds lines through the relay's NMEA path and collects the positions.
func positions(fromNMEA lines: [String], device: String = "d") -> [Position] {
    var assembler = NMEAAssembler()
    var out: [Position] = []
    for line in lines {
        guard line.contains("$"), !line.hasPrefix("#") else { continue }
        guard let sentence = try? NMEASentence.parse(line) else { continue }
        for action in assembler.feed(sentence, device: device) {
            switch action {
            case .flush(let p), .complete(let p): out.append(p)
            case .hold, .skip: break
            }
        }
    }
    if let last = assembler.flush(device: device) { out.append(last) }
    return out
}

@Suite(.offThePool) struct NMEATests {
    @Test func parsesRMCAndGGAOfOneFixIntoOnePosition() throws {
        let lines = [
            "$GPRMC,123519.00,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W",
            "$GPGGA,123519.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,",
            "$GPRMC,123520.00,A,4807.040,N,01131.010,E,022.4,084.4,230394,003.1,W",
            "$GPGGA,123520.00,4807.040,N,01131.010,E,1,08,0.9,545.6,M,46.9,M,,",
        ]
        let fixes = positions(fromNMEA: lines)
        #expect(fixes.count == 2)
        let first = try #require(fixes.first)
        #expect(first.timeMs == Timestamp.milliseconds(fromISO8601: "1994-03-23T12:35:19Z"))
        #expect(abs(first.lat - (48 + 7.038 / 60)) < 1e-9)
        #expect(abs(first.lon - (11 + 31.0 / 60)) < 1e-9)
        #expect(abs(first.speed! - 22.4 * 1852 / 3600) < 1e-9)
        #expect(first.course == 84.4)
        #expect(first.altitude == 545.4)
        #expect(first.attributes == [Attribute("hdop", .number(0.9))])
        #expect(first.accuracy == nil) // only when the config says how
    }

    @Test func accuracyFromHDOPOnlyWhenConfigured() throws {
        let config = try Configuration.parse("{ingest: {nmea: {hdopAccuracyMeters: 5}}}")
        #expect(config.ingest.nmeaAccuracyPerHDOP == 5)
        var assembler = NMEAAssembler(accuracyPerHDOP: 5)
        _ = assembler.feed(
            try NMEASentence.parse("$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W"), device: "d")
        _ = assembler.feed(
            try NMEASentence.parse("$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,"), device: "d")
        let flushed = assembler.flush(device: "d")
        let fix = try #require(flushed)
        #expect(abs((fix.accuracy ?? 0) - 4.5) < 1e-9)
    }

    @Test func checksumsAreCheckedWhenPresent() {
        #expect {
            _ = try NMEASentence.parse("$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*48")
        } throws: { ($0 as? IngestError)?.code == "checksum" }
        #expect((try? NMEASentence.parse("$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,")) != nil)
        #expect(throws: IngestError.self) { _ = try NMEASentence.parse("$GP\u{01}GA,1*00") }
    }

    @Test func voidFixesAndDatelessGGAProduceNothing() {
        let lines = [
            "$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,", // no date yet
            "$GPRMC,123520,V,4807.038,N,01131.000,E,0.0,0.0,230394,,", // void
            "$GPGGA,123521,4807.038,N,01131.000,E,0,00,99,545.4,M,46.9,M,,", // quality 0
        ]
        #expect(positions(fromNMEA: lines).isEmpty)
    }

    @Test func ggaAfterAMidnightRolloverTakesTheNextDay() {
        let lines = [
            "$GPRMC,235959,A,4807.038,N,01131.000,E,0.0,0.0,230394,,",
            "$GPGGA,000001,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,",
        ]
        let fixes = positions(fromNMEA: lines)
        #expect(
            fixes.map(\.timeMs) == [
                Timestamp.milliseconds(fromISO8601: "1994-03-23T23:59:59Z")!,
                Timestamp.milliseconds(fromISO8601: "1994-03-24T00:00:01Z")!,
            ])
    }

    /// Every real log through the NMEA path, compared with gpsd's own decoding.
    @Test(.enabled(if: haveNMEALogs, "../shared/testdata/nmea is absent: the gpsd comparison is skipped"))
    func agreesWithGpsdOnRealReceiverLogs() async throws {
        let (produced, matched) = try await offThePool { try Self.compareWithGpsd() }
        #expect(produced > 500) // 781 from the 45 logs today; most pure-binary logs give none
        #expect(Double(matched) >= 0.95 * Double(produced), "\(matched) of \(produced) agree with gpsd")
    }

    /// Every log's positions against gpsd's TPV reports: how many were produced, how many agree.
    static func compareWithGpsd() throws -> (produced: Int, matched: Int) {
        let logs = try FileManager.default.contentsOfDirectory(atPath: nmeaLogs.path).filter { $0.hasSuffix(".log") }
            .sorted()
        var produced = 0
        var matched = 0
        var report: [String] = []
        for log in logs {
            let data = try Data(contentsOf: nmeaLogs.appendingPathComponent(log))
            // Split on any line end: "\r\n" is one Character in Swift, equal to neither "\r" nor "\n".
            let lines = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline).map(String.init)
            let fixes = positions(fromNMEA: lines)
            // gpsd's TPV reports with a fix, by time of day (its regression runs shift some dates).
            var tpv: [Int64: [(Double, Double)]] = [:]
            // The reports sit between raw receiver output, binary included: decode leniently.
            let checks = String(
                decoding: (try? Data(contentsOf: nmeaLogs.appendingPathComponent(log + ".chk"))) ?? Data(),
                as: UTF8.self)
            for line in checks.split(whereSeparator: \.isNewline) where line.hasPrefix("{\"class\":\"TPV\"") {
                guard case .object(let report)? = try? JSONParser.parse(String(line)),
                    case .number(let mode)? = report["mode"], mode >= 2,
                    case .number(let lat)? = report["lat"], case .number(let lon)? = report["lon"],
                    case .string(let time)? = report["time"], let ms = Timestamp.milliseconds(fromISO8601: time)
                else { continue }
                tpv[(ms % 86_400_000) / 1000, default: []].append((lat, lon))
            }
            var logMatched = 0
            var disagreements: [String] = []
            for fix in fixes {
                let second = (fix.timeMs % 86_400_000) / 1000
                if tpv[second, default: []].contains(where: {
                    abs($0.0 - fix.lat) <= 1e-6 && abs($0.1 - fix.lon) <= 1e-6
                }) {
                    logMatched += 1
                } else if disagreements.count < 2 {
                    disagreements.append("\(Timestamp.iso8601(milliseconds: fix.timeMs)) \(fix.lat),\(fix.lon)")
                }
            }
            produced += fixes.count
            matched += logMatched
            report.append(
                "\(log): \(fixes.count) produced, \(logMatched) matched"
                    + (disagreements.isEmpty ? "" : "; e.g. \(disagreements.joined(separator: " | "))"))
        }
        print(
            "NMEA vs gpsd over \(logs.count) logs: \(matched) of \(produced) positions agree\n"
                + report.joined(separator: "\n"))
        return (produced, matched)
    }
}

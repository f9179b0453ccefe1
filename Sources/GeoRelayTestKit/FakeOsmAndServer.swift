import Foundation
import GeoRelayCore
import Synchronization

/// A Traccar OsmAnd endpoint that decodes requests exactly as Traccar's
/// `OsmAndProtocolDecoder` does (2025 query path), and records what it stored.
///
/// - Parameters come from the URL query; only when it has none, from the body (read as US-ASCII).
/// - `id`/`deviceid` naming an unknown device: 400 at once; no id at all: 400.
/// - A value that does not parse (a bad number or date): the connection is closed with no response.
/// - `speed` is knots and stored as knots; unknown keys become attributes typed as Traccar types them.
/// It is kept independent of the relay's own OsmAnd codec on purpose, so tests are not circular.
package final class FakeOsmAndServer: Sendable {
    /// A position as Traccar would store it.
    package struct Stored: Sendable, Equatable {
        package var uniqueId: String
        package var fixTimeMs: Int64
        package var valid: Bool
        package var lat: Double
        package var lon: Double
        package var speedKnots: Double
        package var course: Double
        package var altitude: Double
        package var accuracy: Double
        package var attributes: [String: AttributeValue]
        /// The keep-alive connection that carried it.
        package var connection: Int
        /// When it was stored (wall clock), for Traccar's buffering (`TraccarModel`).
        package var arrivalMs: Int64 = 0
    }

    /// How the server answers, for fault tests.
    package enum Behaviour: Sendable {
        case normal
        case status(Int, headers: [(String, String)])
        case closeWithoutResponse
        case htmlPage
        /// Reads the request and never answers (until the behaviour changes, then closes):
        /// a server wedged behind a live TCP connection.
        case hang
        /// Answers as `normal`, each request after `microseconds`: a backlog that takes a while to
        /// drain whatever the machine's load (a test of what happens mid-drain).
        case slow(microseconds: UInt32)
    }

    private struct State {
        var positions: [Stored] = []
        var requests = 0
        var bodyBytes = 0
        var unknownDevices: Set<String> = []
        /// Requests for a device in `unknownDevices`, answered 400 as Traccar answers them.
        var unknownDeviceRequests = 0
        /// Requests whose line was longer than Traccar reads.
        var overlongRequestLines = 0
        var behaviour = Behaviour.normal
        var rejectedRequests = 0
        /// Answers to the next payloads, before the behaviour applies.
        var queuedStatuses: [Int?] = []
        /// How a GET naming nothing (the relay's probe) is answered; nil: as Traccar does (400).
        var probeStyle: ServerStyle?
        var probes = 0
    }

    private let state = Mutex(State())
    package let changed = WakeSignal()
    package let http: HTTPTestServer
    private let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - closesAfterEachResponse: behind a proxy that does not keep connections alive.
    ///   - responsesPerConnection: behind nginx, which closes a connection after `keepalive_requests`.
    ///   - host: the address to listen on (`0.0.0.0` inside a test's network namespace; `url` still names loopback).
    ///   - now: the server's wall clock, in ms (a simulation's, on simulated time).
    package init(
        closesAfterEachResponse: Bool = false, responsesPerConnection: Int? = nil, host: String = "127.0.0.1",
        now: @escaping @Sendable () -> Int64 = { WallClock.nowMs() }
    ) throws {
        self.now = now
        let server = WeakReference<FakeOsmAndServer>()
        http = try HTTPTestServer(
            closesAfterEachResponse: closesAfterEachResponse, responsesPerConnection: responsesPerConnection, host: host
        ) { request in
            server.value?.handle(request)
        }
        server.value = self
    }

    package var url: String { http.url }
    package var positions: [Stored] { state.withLock { $0.positions } }

    /// The ledger of what arrived: each device's fix times in order of first arrival, and how
    /// many arrivals repeated a position already there (resends after a crash or a cut answer).
    package var firstArrivals: (byDevice: [String: [Int64]], duplicates: Int) {
        let stored = positions
        var byDevice: [String: [Int64]] = [:]
        var seen = Set<String>()
        for position in stored where seen.insert("\(position.uniqueId) \(position.fixTimeMs)").inserted {
            byDevice[position.uniqueId, default: []].append(position.fixTimeMs)
        }
        return (byDevice, stored.count - seen.count)
    }
    /// One device's arrivals against what it should have had: each of `expected` (fix times,
    /// oldest first) exactly once, in an order `DeliveryOrder` allows, `archive` where it is history.
    /// nil when so, else what is wrong.
    package func deliveryProblem(_ device: String, expected: [Int64]) -> String? {
        if let problem = DeliveryOrder.problem(
            positions.filter { $0.uniqueId == device }.map(\.fixTimeMs), expected: expected)
        {
            return "\(device): \(problem)"
        }
        return orderProblem(device)
    }

    /// What breaks `DeliveryOrder` in a device's first arrivals, or an `archive` flag that
    /// disagrees with it (history carries `archive=true`, as Traccar's decoders mark buffered
    /// records; a position newer than all before it does not); nil when all holds. Across a crash
    /// the flags are not checked (`archive: false`): the relay may not have recorded what it sent
    /// ahead before it died, and Traccar goes by fix time whatever the flag says.
    package func orderProblem(_ device: String, archive: Bool = true) -> String? {
        var seen = Set<Int64>()
        let first = positions.filter { $0.uniqueId == device && seen.insert($0.fixTimeMs).inserted }
        let times = first.map(\.fixTimeMs)
        if let problem = DeliveryOrder.problem(times) { return "\(device): \(problem)" }
        guard archive else { return nil }
        let history = Set(DeliveryOrder.history(times))
        for position in first
        where (position.attributes["archive"] == .bool(true)) != history.contains(position.fixTimeMs) {
            return
                "\(device): fix \(position.fixTimeMs) \(history.contains(position.fixTimeMs) ? "is history without" : "is current with") archive=true"
        }
        return nil
    }

    /// What Traccar made of the positions in the order they came (`TraccarModel`).
    package func traccar(bufferingMs: Int64 = 0) -> TraccarModel {
        TraccarModel(positions.map(TraccarModel.Arrival.init), bufferingMs: bufferingMs)
    }

    package var requestCount: Int { state.withLock { $0.requests } }
    /// How many requests named a device this server does not know.
    package var unknownDeviceRequests: Int { state.withLock { $0.unknownDeviceRequests } }
    /// How many request lines were longer than Traccar's 4,096 bytes.
    package var overlongRequestLines: Int { state.withLock { $0.overlongRequestLines } }
    package var bodyBytes: Int { state.withLock { $0.bodyBytes } }

    /// Forgets everything stored, as a server restored from an old backup.
    package func clear() { state.withLock { $0.positions.removeAll() } }

    package func setUnknownDevices(_ devices: Set<String>) { state.withLock { $0.unknownDevices = devices } }
    package func setBehaviour(_ behaviour: Behaviour) { state.withLock { $0.behaviour = behaviour } }
    /// The next payloads get these statuses (a server that fails a few requests, then recovers),
    /// without being stored; nil takes its payload as the server would.
    package func queueStatuses(_ statuses: [Int?]) { state.withLock { $0.queuedStatuses += statuses } }
    /// Answers probes as the server behind `style` would (nginx, Python, a portal…), whatever the behaviour.
    package func setProbeStyle(_ style: ServerStyle?) { state.withLock { $0.probeStyle = style } }
    /// GET requests naming nothing that this server answered.
    package var probeCount: Int { state.withLock { $0.probes } }

    /// The answer to `request` as it reached the server some other way than its socket (the
    /// simulated network's `SimulatedHTTPServer`); nil: the connection closes without one.
    package func answer(_ request: HTTPTestRequest) -> HTTPTestResponse? { handle(request) }

    private func handle(_ request: HTTPTestRequest) -> HTTPTestResponse? {
        let isProbe = request.method == "GET" && request.body.isEmpty && !request.target.contains("?")
        let (behaviour, probeStyle, queued) = state.withLock { state -> (Behaviour, ServerStyle?, Int?) in
            state.requests += 1
            state.bodyBytes += request.body.count
            if isProbe { state.probes += 1 }
            let queued = !isProbe && !state.queuedStatuses.isEmpty ? state.queuedStatuses.removeFirst() : nil
            return (state.behaviour, state.probeStyle, queued)
        }
        if isProbe, let probeStyle { return probeStyle.probeAnswer }
        if let queued { return HTTPTestResponse(status: queued) }
        // Netty's limits as Traccar's OsmAnd port keeps them: a request line over 4,096 bytes
        // decodes as an empty, failed request (Traccar answers it 400, as an unknown device), and
        // `HttpObjectAggregator(65535)` answers a longer body 413.
        if request.method.utf8.count + request.target.utf8.count + 10 > OsmAndQuery.maxRequestLineBytes {
            state.withLock { $0.overlongRequestLines += 1 }
            return HTTPTestResponse(status: 400)
        }
        if request.body.count > OsmAndQuery.maxBodyBytes { return HTTPTestResponse(status: 413) }
        switch behaviour {
        case .normal: break
        case .slow(let microseconds): usleep(microseconds)
        case .status(let code, let headers): return HTTPTestResponse(status: code, headers: headers)
        case .closeWithoutResponse: return nil
        case .hang:
            // Each connection has its own thread, so holding this one wedges only this request.
            // Capped at a minute so a test that ends while hanging leaves no thread behind for long.
            for _ in 0..<3000 {
                guard case .hang = state.withLock({ $0.behaviour }) else { break }
                usleep(20_000)
            }
            return nil
        case .htmlPage:
            return HTTPTestResponse(
                status: 200, headers: [("Content-Type", "text/html")],
                body: Array("<html><body>Welcome to the hotspot</body></html>".utf8))
        }
        if request.header("Content-Type")?.hasPrefix("application/json") == true {
            return nil // the relay never uses the JSON path; treat it as a decode failure
        }
        do {
            let query = Array(request.target.utf8.drop { $0 != UInt8(ascii: "?") }.dropFirst())
            var parameters = try Self.parameters(query[...])
            if parameters.isEmpty {
                parameters = try Self.parameters(request.body[...])
            }
            let decoded = try decode(parameters, connection: request.connection)
            guard var decoded else { return HTTPTestResponse(status: 400) }
            decoded.arrivalMs = now()
            state.withLock { $0.positions.append(decoded) }
            changed.signal()
            return HTTPTestResponse(status: 200)
        } catch {
            state.withLock { $0.rejectedRequests += 1 }
            return nil
        }
    }

    struct DecodeFailure: Error {}

    /// Traccar's decodeQuery: returns nil for "400 Bad Request", throws for "close the channel".
    private func decode(_ parameters: [(String, String)], connection: Int) throws -> Stored? {
        var stored = Stored(
            uniqueId: "", fixTimeMs: 0, valid: true, lat: 0, lon: 0, speedKnots: 0, course: 0, altitude: 0, accuracy: 0,
            attributes: [:], connection: connection)
        var latitude: Double?
        var longitude: Double?
        var haveTime = false
        let unknown = state.withLock { $0.unknownDevices }
        for (key, value) in parameters {
            switch key {
            case "id", "deviceid":
                if unknown.contains(value) {
                    state.withLock { $0.unknownDeviceRequests += 1 }
                    return nil
                }
                stored.uniqueId = value
            case "valid":
                stored.valid = value.lowercased() == "true" || value == "1"
            case "timestamp":
                if let integer = Int64(value) {
                    stored.fixTimeMs = integer < Int64(Int32.max) ? integer * 1000 : integer
                } else if value.contains("T"), let ms = Timestamp.milliseconds(fromISO8601: value) {
                    stored.fixTimeMs = ms
                } else if let ms = Timestamp.milliseconds(
                    fromISO8601: value.replacingOccurrences(of: " ", with: "T") + "Z")
                {
                    stored.fixTimeMs = ms
                } else {
                    throw DecodeFailure()
                }
                haveTime = true
            case "lat": latitude = try Self.double(value)
            case "lon": longitude = try Self.double(value)
            case "location":
                let parts = value.split(separator: ",", omittingEmptySubsequences: false)
                guard parts.count >= 2 else { throw DecodeFailure() }
                latitude = try Self.double(String(parts[0]))
                longitude = try Self.double(String(parts[1]))
            case "cell":
                // mcc,mnc,lac,cid[,rssi], each parsed with Integer.parseInt.
                let parts = value.split(separator: ",", omittingEmptySubsequences: false)
                guard parts.count >= 4, parts.allSatisfy({ Int32($0) != nil }) else { throw DecodeFailure() }
            case "wifi":
                let parts = value.split(separator: ",", omittingEmptySubsequences: false)
                guard parts.count >= 2, Int32(parts[1]) != nil else { throw DecodeFailure() }
            case "speed": stored.speedKnots = try Self.double(value)
            case "bearing", "heading": stored.course = try Self.double(value)
            case "altitude": stored.altitude = try Self.double(value)
            case "accuracy": stored.accuracy = try Self.double(value)
            case "hdop": stored.attributes["hdop"] = .number(try Self.double(value))
            case "batt": stored.attributes["batteryLevel"] = .number(try Self.double(value))
            case "driverUniqueId": stored.attributes["driverUniqueId"] = .string(value)
            case "charge": stored.attributes["charge"] = .bool(value.lowercased() == "true")
            default:
                if let number = try? Self.double(value) {
                    stored.attributes[key] = .number(number)
                } else if value == "true" || value == "false" {
                    stored.attributes[key] = .bool(value == "true")
                } else {
                    stored.attributes[key] = .string(value)
                }
            }
        }
        guard !stored.uniqueId.isEmpty else { return nil }
        if !haveTime { stored.fixTimeMs = now() }
        if let latitude, let longitude {
            stored.lat = latitude
            stored.lon = longitude
        }
        return stored
    }

    /// Java's Double.parseDouble, near enough: surrounding spaces allowed, NaN and Infinity accepted.
    private static func double(_ value: String) throws -> Double {
        var text = Substring(value)
        while text.first == " " { text = text.dropFirst() }
        while text.last == " " { text = text.dropLast() }
        if let d = Double(text) { return d }
        throw DecodeFailure()
    }

    /// Netty's QueryStringDecoder: `&`-separated, `+` is a space, `%XX` decoded as UTF-8,
    /// and a broken escape throws (so Traccar closes the connection).
    private static func parameters(_ query: ArraySlice<UInt8>) throws -> [(String, String)] {
        var result: [(String, String)] = []
        for pair in query.split(separator: UInt8(ascii: "&")) {
            if let eq = pair.firstIndex(of: UInt8(ascii: "=")) {
                result.append((try decode(pair[pair.startIndex..<eq]), try decode(pair[(eq + 1)...])))
            } else {
                result.append((try decode(pair), ""))
            }
        }
        return result
    }

    private static func decode(_ bytes: ArraySlice<UInt8>) throws -> String {
        guard bytes.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }) else {
            return String(decoding: bytes, as: UTF8.self)
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        func hex(_ c: UInt8) throws -> UInt8 {
            switch c {
            case 48...57: return c - 48
            case 65...70: return c - 55
            case 97...102: return c - 87
            default: throw DecodeFailure()
            }
        }
        while i < bytes.endIndex {
            let c = bytes[i]
            if c == UInt8(ascii: "+") {
                out.append(32)
            } else if c == UInt8(ascii: "%") {
                guard i + 2 < bytes.endIndex + 0, i + 2 <= bytes.endIndex - 1 else { throw DecodeFailure() }
                out.append(try hex(bytes[i + 1]) << 4 | hex(bytes[i + 2]))
                i += 2
            } else {
                out.append(c)
            }
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Waits until `condition` holds over a snapshot of a fake server's records, or `timeout` passes.
///
/// The condition runs on a copy, outside the server's lock, so a costly one never
/// holds the server up; `changed` wakes it when something arrives.
extension FakeOsmAndServer.Stored: TraccarStoredPosition {}

extension FakeOsmAndServer: ArrivalLog {
    package var arrivals: [Stored] { positions }
}

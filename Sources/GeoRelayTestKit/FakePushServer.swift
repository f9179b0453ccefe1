import Foundation
import GeoRelayCore
import GeoRelayForward
import Synchronization

/// A tracking-push tenant gateway as the SDK's documentation describes it:
/// token, login, push and events endpoints on one loopback server.
///
/// It checks every header and body field of the wire contract, decodes zstd
/// and gzip bodies, and records what it accepted. Anything off-contract is
/// answered as a real gateway would (401, 415, 422) and listed in `problems`,
/// so a test can assert there were none. Faults are set on command.
package final class FakePushServer: Sendable {
    package struct Expected: Sendable {
        package var apiKey = "key-123"
        package var clientID = "client-1"
        package var tenant = "acme"
        package var username = "alice"
        package init() {}
    }

    /// A point as the server stored it.
    package struct Point: Sendable, Equatable {
        package var trackerId: String
        package var timestamp: String
        package var lat: Double
        package var lng: Double
        package var fields: JSONObject
    }

    package struct Batch: Sendable {
        package var encoding: String
        package var wireBodyBytes: Int
        package var points: Int
    }

    private struct Token {
        var expiresMs: Int64
        var issuedMs: Int64 = 0
        var loggedIn = false
        var revoked = false
    }

    private struct State {
        var tokens: [String: Token] = [:]
        var issued = 0
        var issuedAtMs: [Int64] = []
        var tokenAgesAtPush: [Int64] = []
        var expiredTokenUses = 0
        var logins = 0
        var points: [Point] = []
        var batches: [Batch] = []
        var events: [String] = []
        var problems: [String] = []
        /// nil: handled as usual.
        var pushStatuses: [Int?] = []
        var tokenStatuses: [Int] = []
        var encodings: Set<String> = ["zstd", "gzip", "identity"]
        var maxPoints = Int.max
        var refusedTrackerTimes: Set<String> = []
        var snakeCase = false
        var expiresIn: Double? = 3600
        /// Every push answered 503 (a maintenance window) while set.
        var unavailable = false
        /// Where accepted points go instead of `points` (a long simulation keeps what it needs).
        var sink: (@Sendable ([Point]) -> Void)?
        /// Pushes answered 401 because the token had expired or was unknown.
        var unauthorized = 0
        /// How a GET (the relay's probe) is answered; nil: 405 with no body.
        var probeStyle: ServerStyle?
    }

    package let expected: Expected
    /// The gateway's clock (token expiry, issue times): the test's, or the faked one of a relay
    /// under libfaketime, so that a token expires in the relay's time.
    private let now: @Sendable () -> Int64
    private let state = Mutex(State())
    package let changed = WakeSignal()
    package let http: HTTPTestServer

    /// - Parameters:
    ///   - readsAhead: as `HTTPTestServer`'s: each answer waits this long for a request behind it.
    ///   - host: the address to listen on (`0.0.0.0` inside a test's network namespace).
    ///   - now: the gateway's wall clock in milliseconds; the test's own by default.
    package init(
        expected: Expected = Expected(), readsAhead: Duration? = nil, host: String = "127.0.0.1",
        now: @escaping @Sendable () -> Int64 = { WallClock.nowMs() }
    ) throws {
        self.expected = expected
        self.now = now
        let server = WeakReference<FakePushServer>()
        http = try HTTPTestServer(host: host, readsAhead: readsAhead) { request in server.value?.handle(request) }
        server.value = self
    }

    /// A push destination in login mode against this gateway, as a configuration would name it.
    /// - Parameter base: where the gateway is reached: its socket, or an address on a simulated
    ///   network that `answer` serves (`SimulatedHTTPServer`).
    package func destination(name: String = "push", base: String? = nil) -> Configuration.DestinationSettings {
        let base = base ?? http.url
        var push = PushSettings()
        push.authBaseURL = base + "/auth/"
        push.registrationBaseURL = base + "/reg/"
        push.eventsBaseURL = base + "/gw"
        push.apiKey = Secret(.literal(expected.apiKey), path: "apiKey")
        push.clientID = expected.clientID
        push.tenant = expected.tenant
        push.username = expected.username
        var settings = Configuration.DestinationSettings()
        settings.name = name
        settings.kind = .push
        settings.url = base + "/push"
        settings.push = push
        return settings
    }

    package var authBaseURL: String { http.url + "/auth/" }
    package var registrationBaseURL: String { http.url + "/reg/" }
    package var pushURL: String { http.url + "/push" }
    package var eventsBaseURL: String { http.url + "/gw" }

    package var points: [Point] { state.withLock { $0.points } }
    package var batches: [Batch] { state.withLock { $0.batches } }
    package var events: [String] { state.withLock { $0.events } }
    package var problems: [String] { state.withLock { $0.problems } }
    package var tokensIssued: Int { state.withLock { $0.issued } }
    /// When each token was issued (from the token endpoint or `issueToken`), on the gateway's clock.
    package var tokensIssuedAtMs: [Int64] { state.withLock { $0.issuedAtMs } }
    /// Per accepted push, how old its token was then (gateway's clock, milliseconds).
    package var tokenAgesAtPush: [Int64] { state.withLock { $0.tokenAgesAtPush } }
    /// Requests refused 401 because their token had expired (`setExpiresIn`), not revoked or unknown.
    package var expiredTokenUses: Int { state.withLock { $0.expiredTokenUses } }
    /// Every token value handed out, so a test can look for them where they must not be.
    package var issuedTokens: [String] { state.withLock { Array($0.tokens.keys) } }
    /// Revokes every token but the newest issued.
    package func revokeAllButNewest() {
        state.withLock { state in
            let newest = state.tokens.keys.max {
                (Int($0.split(separator: "-")[1]) ?? 0) < (Int($1.split(separator: "-")[1]) ?? 0)
            }
            for key in state.tokens.keys where key != newest { state.tokens[key]?.revoked = true }
        }
    }
    package var logins: Int { state.withLock { $0.logins } }

    /// The next pushes' answers in the order they arrive; nil takes that one as usual, 0 drops its connection.
    package func queuePushStatuses(_ statuses: [Int?]) { state.withLock { $0.pushStatuses += statuses } }
    /// Answers probes as the server behind `style` would (nginx, Python, a portal…).
    package func setProbeStyle(_ style: ServerStyle?) { state.withLock { $0.probeStyle = style } }
    package func queueTokenStatuses(_ statuses: [Int]) { state.withLock { $0.tokenStatuses += statuses } }
    /// Content-Encodings accepted (`identity` is no encoding); others get 415.
    package func setEncodings(_ encodings: Set<String>) { state.withLock { $0.encodings = encodings } }
    /// Batches with more points get 413.
    package func setMaxPoints(_ n: Int) { state.withLock { $0.maxPoints = n } }
    /// A batch holding a point with this trackerId and timestamp gets 422.
    package func refuse(trackerId: String, timestamp: String) {
        state.withLock { _ = $0.refusedTrackerTimes.insert(trackerId + " " + timestamp) }
    }
    /// While set, every push is answered 503 with `Retry-After: 120`, as in a maintenance window.
    package func setUnavailable(_ on: Bool) { state.withLock { $0.unavailable = on } }
    /// Accepted points go to `sink` from now on, not to `points`.
    package func sendPoints(to sink: @escaping @Sendable ([Point]) -> Void) { state.withLock { $0.sink = sink } }
    /// Pushes answered 401 because their token had expired, was revoked or unknown.
    package var unauthorized: Int { state.withLock { $0.unauthorized } }
    /// Every token issued so far stops working (as if it expired).
    package func expireAllTokens() { state.withLock { for key in $0.tokens.keys { $0.tokens[key]?.revoked = true } } }
    /// Answer the token in snake_case (`access_token`, `expires_in`).
    package func useSnakeCase(_ on: Bool) { state.withLock { $0.snakeCase = on } }
    package func setExpiresIn(_ seconds: Double?) { state.withLock { $0.expiresIn = seconds } }
    /// Issues a token directly, as an app managing its own tokens would get one.
    package func issueToken(loggedIn: Bool = true) -> String {
        state.withLock { state in
            state.issued += 1
            let token = "tok-\(state.issued)-\(UUID().uuidString.prefix(8))"
            let issuedMs = now()
            state.issuedAtMs.append(issuedMs)
            state.tokens[token] = Token(expiresMs: .max, issuedMs: issuedMs, loggedIn: loggedIn)
            return token
        }
    }

    /// Waits until every fix time in `expected` (per device) has arrived at least once,
    /// as the relay names trackers: `device@username`.
    package func waitForAll(_ expected: [String: Set<Int64>], timeout: Duration = .seconds(30)) async -> Bool {
        let byTracker = trackers(expected)
        return await waitUntil(timeout: timeout) { Self.holdsAll(byTracker, $0) }
    }

    /// As `waitForAll`, for as long as points keep arriving: fails once none has come for
    /// `stalledFor`. For a drain whose pace is the machine's.
    package func waitForAllWhileArriving(_ expected: [String: Set<Int64>], stalledFor: Duration = .seconds(60))
        async -> Bool
    {
        let byTracker = trackers(expected)
        let total = expected.values.reduce(0) { $0 + $1.count }
        return await waitWhileArriving(stalledFor: stalledFor) { $0.count >= total && Self.holdsAll(byTracker, $0) }
    }

    /// The expected fix times by tracker id, as the gateway names devices.
    private func trackers(_ expected: [String: Set<Int64>]) -> [String: Set<Int64>] {
        Dictionary(uniqueKeysWithValues: expected.map { ("\($0.key)@\(self.expected.username)", $0.value) })
    }

    private static func holdsAll(_ expected: [String: Set<Int64>], _ points: [Point]) -> Bool {
        var missing = expected
        for point in points {
            if let ms = Timestamp.milliseconds(fromISO8601: point.timestamp) {
                missing[point.trackerId]?.remove(ms)
            }
        }
        return missing.values.allSatisfy(\.isEmpty)
    }

    // MARK: - Handling

    private func problem(_ text: String, status: Int) -> HTTPTestResponse {
        state.withLock { $0.problems.append(text) }
        return HTTPTestResponse(
            status: status, headers: [("Content-Type", "application/json")], body: Array("{\"error\":\"\(text)\"}".utf8)
        )
    }

    private func json(_ request: HTTPTestRequest) -> JSONObject? {
        guard request.header("Content-Type")?.hasPrefix("application/json") == true,
            case .object(let object)? = try? JSONParser.parse(String(decoding: request.body, as: UTF8.self))
        else { return nil }
        return object
    }

    /// The request's token if it is one the gateway issued and still honours, with its age.
    private func bearer(_ request: HTTPTestRequest, needLogin: Bool) -> (token: String, ageMs: Int64)? {
        guard let header = request.header("Authorization"), header.hasPrefix("Bearer ") else { return nil }
        let token = String(header.dropFirst(7))
        let nowMs = now()
        return state.withLock { state in
            guard let info = state.tokens[token], !info.revoked else { return nil }
            guard info.expiresMs > nowMs else {
                state.expiredTokenUses += 1
                return nil
            }
            return !needLogin || info.loggedIn ? (token, nowMs - info.issuedMs) : nil
        }
    }

    /// The answer to `request` as it reached the gateway some other way than its socket (the
    /// simulated network's `SimulatedHTTPServer`); nil: the connection closes without one.
    package func answer(_ request: HTTPTestRequest) -> HTTPTestResponse? { handle(request) }

    private func handle(_ request: HTTPTestRequest) -> HTTPTestResponse? {
        let path = String(request.target.prefix { $0 != "?" })
        // A GET with no body is the relay's probe (`ServerCheck`): a real gateway answers it 405 too.
        if request.method == "GET", request.body.isEmpty {
            return state.withLock { $0.probeStyle }?.probeAnswer ?? HTTPTestResponse(status: 405)
        }
        guard request.method == "POST" else { return problem("\(request.method) \(path): only POST", status: 405) }
        switch path {
        case "/auth/api/auth/token": return token(request)
        case "/reg/api/users/login": return login(request)
        case "/push": return push(request)
        case "/gw/api/ndms2/events": return event(request)
        default: return problem("unknown path \(path)", status: 404)
        }
    }

    private func token(_ request: HTTPTestRequest) -> HTTPTestResponse? {
        if let status = state.withLock({ $0.tokenStatuses.isEmpty ? nil : $0.tokenStatuses.removeFirst() }) {
            return HTTPTestResponse(status: status)
        }
        guard request.header("x-api-key") == expected.apiKey else {
            return problem("token: wrong or missing x-api-key", status: 401)
        }
        guard let body = json(request), body["clientId"] == .string(expected.clientID),
            body["tenant"] == .string(expected.tenant)
        else {
            return problem("token: body must be JSON {clientId, tenant}", status: 400)
        }
        let (token, snake, expiresIn) = state.withLock { state -> (String, Bool, Double?) in
            state.issued += 1
            let token = "tok-\(state.issued)-\(UUID().uuidString.prefix(8))"
            let issuedMs = now()
            state.issuedAtMs.append(issuedMs)
            state.tokens[token] = Token(
                expiresMs: state.expiresIn.flatMap { CheckedNumbers.milliseconds(seconds: $0) }.map {
                    issuedMs.saturatingPlus($0)
                } ?? .max, issuedMs: issuedMs)
            return (token, state.snakeCase, state.expiresIn)
        }
        var members: [(key: String, value: JSONValue)] = [(snake ? "access_token" : "accessToken", .string(token))]
        if let expiresIn { members.append((snake ? "expires_in" : "expiresIn", .number(expiresIn))) }
        return HTTPTestResponse(
            status: 200, headers: [("Content-Type", "application/json")],
            body: Array(JSONValue.object(JSONObject(members)).jsonText.utf8))
    }

    private func login(_ request: HTTPTestRequest) -> HTTPTestResponse? {
        guard let token = bearer(request, needLogin: false)?.token else {
            return problem("login: no valid bearer token", status: 401)
        }
        guard let body = json(request), body["username"] == .string(expected.username),
            body["tenant"] == .string(expected.tenant)
        else {
            return problem("login: body must be JSON {username, tenant}", status: 400)
        }
        state.withLock { state in
            state.tokens[token]?.loggedIn = true
            state.logins += 1
        }
        return HTTPTestResponse(status: 200)
    }

    private func event(_ request: HTTPTestRequest) -> HTTPTestResponse? {
        guard bearer(request, needLogin: false) != nil else {
            return problem("event: no valid bearer token", status: 401)
        }
        guard request.target.hasSuffix("?api-key=\(expected.apiKey)") else {
            return problem("event: api-key query missing or wrong", status: 401)
        }
        guard let body = json(request), body["typeCode"] == .string("DUTY"),
            case .string(let action)? = body["actionCode"], action == "on_duty" || action == "off_duty"
        else {
            return problem("event: body must be {typeCode: DUTY, actionCode: on_duty|off_duty}", status: 400)
        }
        state.withLock { $0.events.append(action) }
        return HTTPTestResponse(status: 200)
    }

    private func push(_ request: HTTPTestRequest) -> HTTPTestResponse? {
        if state.withLock({ $0.unavailable }) {
            return HTTPTestResponse(status: 503, headers: [("Retry-After", "120")])
        }
        if let queued = state.withLock({ state -> Int?? in
            state.pushStatuses.isEmpty ? .none : .some(state.pushStatuses.removeFirst())
        }),
            let status = queued
        {
            if status == 0 { return nil } // drop the connection
            return HTTPTestResponse(
                status: status, headers: status == 429 || status == 503 ? [("Retry-After", "1")] : [])
        }
        guard let (_, tokenAge) = bearer(request, needLogin: true) else {
            state.withLock { $0.unauthorized += 1 }
            return HTTPTestResponse(status: 401)
        }
        guard request.header("X-Tenant") == expected.tenant else {
            return problem("push: X-Tenant must be \(expected.tenant)", status: 400)
        }
        guard request.header("Content-Type") == "application/json" else {
            return problem("push: Content-Type must be application/json", status: 415)
        }
        let encoding = request.header("Content-Encoding") ?? "identity"
        guard state.withLock({ $0.encodings.contains(encoding) }) else { return HTTPTestResponse(status: 415) }
        let body: [UInt8]
        do {
            switch encoding {
            case "zstd": body = try Zstd.decompress(request.body)
            case "gzip": body = try Gzip.decompress(request.body)
            case "identity": body = request.body
            default: return HTTPTestResponse(status: 415)
            }
        } catch {
            return problem("push: body does not decode as \(encoding): \(error)", status: 400)
        }
        guard case .array(let items)? = try? JSONParser.parse(String(decoding: body, as: UTF8.self)) else {
            return problem("push: body is not a JSON array", status: 400)
        }
        if items.count > state.withLock({ $0.maxPoints }) { return HTTPTestResponse(status: 413) }
        var points: [Point] = []
        for (index, item) in items.enumerated() {
            switch validate(item) {
            case .success(let point): points.append(point)
            case .failure(let reason): return problem("push: point \(index): \(reason)", status: 422)
            }
        }
        let refused = state.withLock { state in
            points.contains { state.refusedTrackerTimes.contains($0.trackerId + " " + $0.timestamp) }
        }
        if refused { return HTTPTestResponse(status: 422, body: Array("{\"error\":\"invalid point\"}".utf8)) }
        let sink = state.withLock { state in
            if state.sink == nil { state.points += points }
            state.tokenAgesAtPush.append(tokenAge)
            state.batches.append(Batch(encoding: encoding, wireBodyBytes: request.body.count, points: points.count))
            return state.sink
        }
        sink?(points)
        changed.signal()
        return HTTPTestResponse(
            status: 200, headers: [("Content-Type", "application/json")],
            body: Array("{\"accepted\":\(points.count)}".utf8))
    }

    struct Invalid: Error { let reason: String }

    private static let allowedFields: Set<String> = [
        "driver", "trackerId", "timestamp", "lat", "lng", "speed", "heading", "altitude", "accuracy", "battery",
        "alarm",
    ]

    private func validate(_ item: JSONValue) -> Result<Point, Invalid> {
        guard case .object(let object) = item else { return .failure(Invalid(reason: "not an object")) }
        if let extra = object.members.first(where: { !Self.allowedFields.contains($0.key) }) {
            return .failure(Invalid(reason: "unknown field \(extra.key)"))
        }
        guard object["driver"] == .string(expected.username) else {
            return .failure(Invalid(reason: "driver must be \(expected.username)"))
        }
        guard case .string(let tracker)? = object["trackerId"], tracker.hasSuffix("@\(expected.username)"),
            tracker.count > expected.username.count + 1
        else {
            return .failure(Invalid(reason: "trackerId must be <device>@\(expected.username)"))
        }
        guard case .string(let timestamp)? = object["timestamp"], Self.isISOMillisUTC(timestamp) else {
            return .failure(Invalid(reason: "timestamp must be ISO 8601 UTC with milliseconds"))
        }
        guard case .number(let lat)? = object["lat"], (-90...90).contains(lat), case .number(let lng)? = object["lng"],
            (-180...180).contains(lng)
        else {
            return .failure(Invalid(reason: "lat and lng must be numbers on the globe"))
        }
        for key in ["speed", "heading", "altitude", "accuracy", "battery"] {
            if let value = object[key], case .number = value {
            } else if object[key] != nil {
                return .failure(Invalid(reason: "\(key) must be a number"))
            }
        }
        if let alarm = object["alarm"], case .string = alarm {
        } else if object["alarm"] != nil {
            return .failure(Invalid(reason: "alarm must be a string"))
        }
        return .success(Point(trackerId: tracker, timestamp: timestamp, lat: lat, lng: lng, fields: object))
    }

    /// `2026-07-25T04:30:00.000Z` exactly.
    static func isISOMillisUTC(_ text: String) -> Bool {
        let b = Array(text.utf8)
        guard b.count == 24, b[23] == UInt8(ascii: "Z"), b[19] == UInt8(ascii: ".") else { return false }
        return Timestamp.milliseconds(fromISO8601: text) != nil
    }
}

extension FakePushServer: ArrivalLog {
    package var arrivals: [Point] { points }
}

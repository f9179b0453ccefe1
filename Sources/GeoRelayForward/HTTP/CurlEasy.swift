import CCurl
import GeoRelayCore
import Glibc
import Synchronization

/// An HTTP request as the forwarders make them.
package struct HTTPRequest: Sendable {
    package var method: String
    package var url: String
    package var headers: [(String, String)]
    package var body: [UInt8]
    package var timeoutSeconds: Double
    package var connectTimeoutSeconds: Double

    package init(
        method: String = "POST", url: String, headers: [(String, String)] = [], body: [UInt8] = [],
        timeoutSeconds: Double = 30, connectTimeoutSeconds: Double = 10
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutSeconds = timeoutSeconds
        self.connectTimeoutSeconds = connectTimeoutSeconds
    }
}

/// What came back, and what it cost on the wire.
package struct HTTPResponse: Sendable {
    package var status: Int
    package var headers: [(String, String)]
    package var body: [UInt8]
    /// Bytes sent and received at the HTTP level (headers and bodies), for the uplink budget.
    package var wireBytes: Int

    /// The last value of a header; names compare ASCII case-insensitively (no Foundation on the hot path).
    package func header(_ name: String) -> String? {
        headers.last { Self.sameName($0.0, name) }?.1
    }

    static func sameName(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && zip(a.utf8, b.utf8).allSatisfy { $0 | 0x20 == $1 | 0x20 }
    }
}

/// Owns one curl easy handle. Reusing it keeps its connection alive between
/// requests, which is how one connection carries many positions.
///
/// Options that never change are set once; each request sets only its own.
/// Not `Sendable`: confine it to one thread (`QueueConfined`, or a `CurlMulti` loop).
package final class CurlEasy {
    let handle: UnsafeMutableRawPointer
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
    private let sink = Sink()
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var headerListFor: [(String, String)]?
    private var currentURL: String?
    /// The request being transferred: curl reads its body in place, so it must live until the end.
    private var body: [UInt8] = []
    /// Bills this handle's sockets to its destination (kept alive as long as the handle).
    private let meter: WireMeter?
    /// Bills the name lookups curl starts for this handle's host.
    private var lookups: LookupBill?

    /// libcurl's one-time setup, shared by every handle the relay makes (`CurlConnection` too).
    static let globalInit: Bool = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK
    }()

    /// - Parameter tls: how HTTPS servers are verified; fixed for the handle's life, like its destination.
    /// - Parameter meter: what this handle's connections cost the link is billed there.
    package init(tls: Configuration.TLSSettings = .init(), meter: WireMeter? = nil) throws(CurlError) {
        _ = Self.globalInit
        guard let handle = curl_easy_init() else {
            throw CurlError(CURLE_FAILED_INIT, message: "curl_easy_init failed")
        }
        self.handle = handle
        self.meter = meter
        errorBuffer.initialize(to: 0)
        try setConstantOptions()
        try Self.setTLS(tls, on: handle)
        lookups = try meter?.attach(to: handle)
    }

    /// How `handle` verifies HTTPS servers: the one place for it, so that `CurlEasy` and
    /// `CurlConnection` cannot drift apart on certificate checks.
    ///
    /// curl verifies the peer and the host name by default; this only adds a CA file or, when
    /// asked in so many words, turns verification off.
    static func setTLS(_ tls: Configuration.TLSSettings, on handle: UnsafeMutableRawPointer) throws(CurlError) {
        if let caFile = tls.caFile {
            try check(georelay_curl_setopt_string(handle, CURLOPT_CAINFO, caFile))
        }
        if tls.insecure {
            try check(georelay_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 0))
            try check(georelay_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 0))
        }
    }

    deinit {
        curl_easy_cleanup(handle)
        curl_slist_free_all(headerList)
        errorBuffer.deallocate()
    }

    /// Collects the response while curl calls back.
    private final class Sink {
        var body: [UInt8] = []
        var headers: [(String, String)] = []
        let maxBody = 1 << 20
    }

    private func setConstantOptions() throws(CurlError) {
        try check(georelay_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer))
        try check(georelay_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        try check(georelay_curl_setopt_long(handle, CURLOPT_TCP_KEEPALIVE, 1))
        try check(georelay_curl_setopt_string(handle, CURLOPT_USERAGENT, "georelay"))
        let opaque = Unmanaged.passUnretained(sink).toOpaque()
        try check(
            georelay_curl_setopt_write_function(handle) { data, size, count, user in
                let sink = Unmanaged<Sink>.fromOpaque(user!).takeUnretainedValue()
                let n = size * count
                if sink.body.count + n > sink.maxBody { return 0 }
                if let data { sink.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n)) }
                return n
            })
        try check(georelay_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, opaque))
        try check(
            georelay_curl_setopt_header_function(handle) { data, size, count, user in
                let sink = Unmanaged<Sink>.fromOpaque(user!).takeUnretainedValue()
                let n = size * count
                guard let data else { return n }
                let bytes = UnsafeRawBufferPointer(start: data, count: n)
                if bytes.starts(with: "HTTP/".utf8) {
                    sink.headers.removeAll()
                } else if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
                    let name = String(decoding: bytes[..<colon], as: UTF8.self)
                    var value = bytes[(colon + 1)...]
                    while let first = value.first, first == 32 || first == 9 { value = value.dropFirst() }
                    while let last = value.last, last == 10 || last == 13 || last == 32 { value = value.dropLast() }
                    sink.headers.append((name, String(decoding: value, as: UTF8.self)))
                }
                return n
            })
        try check(georelay_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, opaque))
    }

    /// The next transfer opens a new connection: none kept alive is reused (each is closed as
    /// too old), so after a route change nothing flows over the uplink it was opened on.
    package func forgetConnections() {
        forgetting = true
    }
    private var forgetting = false

    /// Sets up `request` for `perform`.
    private func configure(_ request: HTTPRequest, abort: AbortFlag? = nil) throws(CurlError) {
        // 0: no kept-alive connection is young enough to reuse; then curl's default again (118 s).
        try check(georelay_curl_setopt_long(handle, CURLOPT_MAXAGE_CONN, forgetting ? 0 : 118))
        forgetting = false
        errorBuffer.pointee = 0
        sink.body.removeAll(keepingCapacity: true)
        sink.headers.removeAll(keepingCapacity: true)
        body = request.body
        if currentURL != request.url {
            try check(georelay_curl_setopt_string(handle, CURLOPT_URL, request.url))
            currentURL = request.url
            lookups?.host(of: request.url)
        }
        try check(georelay_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, Int(request.timeoutSeconds * 1000)))
        try check(
            georelay_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(request.connectTimeoutSeconds * 1000)))
        if headerListFor.map({ !$0.elementsEqual(request.headers, by: ==) }) ?? true {
            // Every path checks, not only the pipelined one: a token from a file or an auth server
            // with a CR or LF would add a header of the server's choosing. The value is not named:
            // it may be a secret.
            for (name, value) in request.headers
            where name.isEmpty || !name.utf8.allSatisfy(HTTP1ResponseParser.isTokenByte)
                || !value.utf8.allSatisfy(HTTP1ResponseParser.isFieldValueByte)
            {
                throw CurlError(
                    CURLE_BAD_FUNCTION_ARGUMENT,
                    message: "header \(ControlEscaping.escape(name)) holds a character HTTP does not allow; not sent")
            }
            curl_slist_free_all(headerList)
            headerList = nil
            // No "Expect: 100-continue" (a round trip fewer on a slow link) and no
            // "Accept: */*" (13 bytes per request that no server here needs).
            for header in request.headers + [("Expect", ""), ("Accept", "")] {
                headerList = curl_slist_append(headerList, "\(header.0): \(header.1)")
            }
            headerListFor = request.headers
            try check(georelay_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, headerList))
        }
        switch request.method {
        case "POST":
            try check(georelay_curl_setopt_long(handle, CURLOPT_POST, 1))
            try check(
                body.withUnsafeBytes { raw in
                    georelay_curl_setopt_pointer(
                        handle, CURLOPT_POSTFIELDS,
                        UnsafeMutableRawPointer(mutating: raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!))
                })
            try check(georelay_curl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, body.count))
        case "GET":
            try check(georelay_curl_setopt_long(handle, CURLOPT_HTTPGET, 1))
        default:
            try check(georelay_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, request.method))
        }
        try setAbort(abort)
    }

    /// Lets `abort` end the next transfer from another thread (curl's progress callback checks it).
    private func setAbort(_ abort: AbortFlag?) throws(CurlError) {
        guard let abort else {
            try check(georelay_curl_setopt_long(handle, CURLOPT_NOPROGRESS, 1))
            return
        }
        try check(georelay_curl_setopt_long(handle, CURLOPT_NOPROGRESS, 0))
        try check(
            georelay_curl_setopt_xferinfo_function(handle) { user, _, _, _, _ in
                Unmanaged<AbortFlag>.fromOpaque(user!).takeUnretainedValue().isSet ? 1 : 0
            })
        try check(
            georelay_curl_setopt_pointer(handle, CURLOPT_XFERINFODATA, Unmanaged.passUnretained(abort).toOpaque()))
    }

    /// The outcome of the transfer that just ended with `code`.
    private func result(_ code: CURLcode) throws(CurlError) -> HTTPResponse {
        if let meter {
            var active: curl_socket_t = -1
            if georelay_curl_getinfo_socket(handle, CURLINFO_ACTIVESOCKET, &active) == CURLE_OK, active != -1 {
                meter.sample(active)
            }
        }
        try check(code, errorBuffer)
        var status = 0
        _ = georelay_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        return HTTPResponse(status: status, headers: sink.headers, body: sink.body, wireBytes: wireBytes())
    }

    /// Performs one request, blocking the calling thread. Setting `abort`
    /// from another thread ends it within about a second (shutdown).
    package func perform(_ request: HTTPRequest, abort: AbortFlag? = nil) throws(CurlError) -> HTTPResponse {
        try configure(request, abort: abort)
        let code = withExtendedLifetime(abort) { curl_easy_perform(handle) }
        return try result(code)
    }

    private func wireBytes() -> Int {
        var requestSize = 0
        var headerSize = 0
        var uploaded: curl_off_t = 0
        var downloaded: curl_off_t = 0
        _ = georelay_curl_getinfo_long(handle, CURLINFO_REQUEST_SIZE, &requestSize)
        _ = georelay_curl_getinfo_long(handle, CURLINFO_HEADER_SIZE, &headerSize)
        _ = georelay_curl_getinfo_off(handle, CURLINFO_SIZE_UPLOAD_T, &uploaded)
        _ = georelay_curl_getinfo_off(handle, CURLINFO_SIZE_DOWNLOAD_T, &downloaded)
        // curl sends a small POST body with the headers and counts it in REQUEST_SIZE;
        // a large one (tens of KiB) goes separately and is counted only as uploaded.
        let sent = requestSize >= Int(uploaded) ? requestSize : requestSize + Int(uploaded)
        return sent + headerSize + Int(downloaded)
    }
}

@available(*, unavailable)
extension CurlEasy: Sendable {}

/// Set from any thread to abandon a transfer in progress.
package final class AbortFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    package init() {}
    package func set() { flag.store(true, ordering: .relaxed) }
    package var isSet: Bool { flag.load(ordering: .relaxed) }
}

import CCurl
import Foundation
import GeoRelayCore
import Synchronization

/// An HTTP request as the forwarders make them.
package struct HTTPRequest: Sendable {
    package var method: String
    package var url: String
    package var headers: [(String, String)]
    package var body: [UInt8]
    package var timeoutSeconds: Double
    package var connectTimeoutSeconds: Double

    package init(method: String = "POST", url: String, headers: [(String, String)] = [], body: [UInt8] = [],
                 timeoutSeconds: Double = 30, connectTimeoutSeconds: Double = 10) {
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

    package func header(_ name: String) -> String? {
        headers.last { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }
}

/// Owns one curl easy handle. Reusing it keeps the connection alive between
/// requests, which is how one connection carries many positions.
///
/// Not `Sendable`: confine it to one queue (`QueueConfined`).
package final class CurlEasy {
    private let handle: UnsafeMutableRawPointer
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)

    private static let globalInit: Bool = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK
    }()

    package init() throws(CurlError) {
        _ = Self.globalInit
        guard let handle = curl_easy_init() else {
            throw CurlError(code: CURLE_FAILED_INIT.rawValue, message: "curl_easy_init failed")
        }
        self.handle = handle
        errorBuffer.initialize(to: 0)
    }

    deinit {
        curl_easy_cleanup(handle)
        errorBuffer.deallocate()
    }

    /// Collects the response while curl calls back.
    private final class Sink {
        var body: [UInt8] = []
        var headers: [(String, String)] = []
        var maxBody = 1 << 20
    }

    /// Performs one request, blocking the calling thread. Setting `abort`
    /// from another thread ends it within about a second (shutdown).
    package func perform(_ request: HTTPRequest, abort: AbortFlag? = nil) throws(CurlError) -> HTTPResponse {
        curl_easy_reset(handle)
        errorBuffer.pointee = 0
        let sink = Sink()
        let unmanaged = Unmanaged.passRetained(sink)
        defer { unmanaged.release() }
        var list: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(list) }
        // Disable curl's "Expect: 100-continue": one round trip fewer on a slow link.
        for header in request.headers + [("Expect", "")] {
            list = curl_slist_append(list, "\(header.0): \(header.1)")
        }
        let result: Result<HTTPResponse, CurlError> = request.body.withUnsafeBufferPointer { body in
            do throws(CurlError) {
                try check(georelay_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer))
                try check(georelay_curl_setopt_string(handle, CURLOPT_URL, request.url))
                try check(georelay_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
                try check(georelay_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, Int(request.timeoutSeconds * 1000)))
                try check(georelay_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(request.connectTimeoutSeconds * 1000)))
                try check(georelay_curl_setopt_long(handle, CURLOPT_TCP_KEEPALIVE, 1))
                try check(georelay_curl_setopt_string(handle, CURLOPT_USERAGENT, "georelay"))
                try check(georelay_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, list))
                if request.method == "POST" {
                    try check(georelay_curl_setopt_long(handle, CURLOPT_POST, 1))
                    try check(georelay_curl_setopt_pointer(handle, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: body.baseAddress ?? UnsafePointer(bitPattern: 1)!)))
                    try check(georelay_curl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, body.count))
                } else if request.method != "GET" {
                    try check(georelay_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, request.method))
                }
                try check(georelay_curl_setopt_write_function(handle) { data, size, count, user in
                    let sink = Unmanaged<Sink>.fromOpaque(user!).takeUnretainedValue()
                    let n = size * count
                    if sink.body.count + n > sink.maxBody { return 0 }
                    if let data { sink.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: n)) }
                    return n
                })
                try check(georelay_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, unmanaged.toOpaque()))
                try check(georelay_curl_setopt_header_function(handle) { data, size, count, user in
                    let sink = Unmanaged<Sink>.fromOpaque(user!).takeUnretainedValue()
                    let n = size * count
                    if let data {
                        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: n), as: UTF8.self)
                        if line.hasPrefix("HTTP/") {
                            sink.headers.removeAll()
                        } else if let colon = line.firstIndex(of: ":") {
                            sink.headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)))
                        }
                    }
                    return n
                })
                try check(georelay_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, unmanaged.toOpaque()))
                if let abort {
                    try check(georelay_curl_setopt_long(handle, CURLOPT_NOPROGRESS, 0))
                    try check(georelay_curl_setopt_xferinfo_function(handle) { user, _, _, _, _ in
                        Unmanaged<AbortFlag>.fromOpaque(user!).takeUnretainedValue().isSet ? 1 : 0
                    })
                    try check(georelay_curl_setopt_pointer(handle, CURLOPT_XFERINFODATA, Unmanaged.passUnretained(abort).toOpaque()))
                }
                try withExtendedLifetime(abort) { () throws(CurlError) in
                    try check(curl_easy_perform(handle), errorBuffer)
                }
                var status = 0
                _ = georelay_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
                return .success(HTTPResponse(status: status, headers: sink.headers, body: sink.body, wireBytes: wireBytes()))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Opens a TCP (and TLS) connection to the URL's host and nothing more:
    /// the cheapest proof that the uplink and the server are back.
    package func connectOnly(url: String, timeoutSeconds: Double) throws(CurlError) {
        curl_easy_reset(handle)
        errorBuffer.pointee = 0
        try check(georelay_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer))
        try check(georelay_curl_setopt_string(handle, CURLOPT_URL, url))
        try check(georelay_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        try check(georelay_curl_setopt_long(handle, CURLOPT_CONNECT_ONLY, 1))
        try check(georelay_curl_setopt_long(handle, CURLOPT_FRESH_CONNECT, 1))
        try check(georelay_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(timeoutSeconds * 1000)))
        try check(curl_easy_perform(handle), errorBuffer)
    }

    private func wireBytes() -> Int {
        var requestSize = 0, headerSize = 0
        var uploaded: curl_off_t = 0, downloaded: curl_off_t = 0
        _ = georelay_curl_getinfo_long(handle, CURLINFO_REQUEST_SIZE, &requestSize)
        _ = georelay_curl_getinfo_long(handle, CURLINFO_HEADER_SIZE, &headerSize)
        _ = georelay_curl_getinfo_off(handle, CURLINFO_SIZE_UPLOAD_T, &uploaded)
        _ = georelay_curl_getinfo_off(handle, CURLINFO_SIZE_DOWNLOAD_T, &downloaded)
        return requestSize + headerSize + Int(uploaded) + Int(downloaded)
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

import CCurl

/// A failed transfer or a failed call on a curl handle: which code, and curl's text. HTTP
/// statuses are not errors here; the destination decides what each one means.
package struct CurlError: Error, Sendable, CustomStringConvertible {
    /// curl's two code spaces: `CURLcode` from an easy handle (a transfer, an option) and
    /// `CURLMcode` from a multi handle. Their numbers overlap (3 is a malformed URL for one and
    /// a bad easy handle for the other), so each code says which space it is from.
    /// Equatable, not Hashable: Swift 6.0 imports C enums such as `CURLcode` without Hashable.
    package enum Code: Sendable, Equatable, CustomStringConvertible {
        case easy(CURLcode)
        case multi(CURLMcode)

        package var description: String {
            switch self {
            case .easy(let code): "curl error \(code.rawValue)"
            case .multi(let code): "curl multi error \(code.rawValue)"
            }
        }
    }

    package let code: Code
    package let message: String

    /// A failure of an easy handle, or of a transfer (`CURLE_*`).
    package init(_ code: CURLcode, message: String) {
        self.code = .easy(code)
        self.message = message
    }

    /// A failure of a multi handle (`CURLM_*`).
    package init(multi code: CURLMcode, message: String) {
        self.code = .multi(code)
        self.message = message
    }

    package var description: String { "\(code): \(message)" }

    /// The server closed the connection without answering: Traccar's way of refusing a payload it cannot decode.
    package var isNoResponse: Bool { code == .easy(CURLE_GOT_NOTHING) }
    package var isTimeout: Bool { code == .easy(CURLE_OPERATION_TIMEDOUT) }
    package var isConnectFailure: Bool {
        code == .easy(CURLE_COULDNT_CONNECT) || code == .easy(CURLE_COULDNT_RESOLVE_HOST)
            || code == .easy(CURLE_COULDNT_RESOLVE_PROXY)
    }
}

/// The one place curl's easy codes become Swift errors; the message is the handle's error
/// buffer when it says more than curl's generic text.
func check(_ code: CURLcode, _ errorBuffer: UnsafePointer<CChar>? = nil) throws(CurlError) {
    guard code != CURLE_OK else { return }
    var message = String(cString: curl_easy_strerror(code))
    if let errorBuffer, errorBuffer.pointee != 0 {
        message = String(cString: errorBuffer)
    }
    throw CurlError(code, message: message)
}

/// The one place curl's multi codes become Swift errors.
func check(_ code: CURLMcode) throws(CurlError) {
    guard code != CURLM_OK else { return }
    throw CurlError(multi: code, message: String(cString: curl_multi_strerror(code)))
}

import CCurl

/// A failed transfer or a failed call on a curl handle: which code, and curl's text. HTTP
/// statuses are not errors here; the destination decides what each one means.
package struct CurlError: Error, Sendable, CustomStringConvertible {
    /// curl's code for the transfer or option that failed.
    /// Equatable, not Hashable: Swift 6.0 imports C enums such as `CURLcode` without Hashable.
    package let code: CURLcode
    package let message: String

    /// A failure of an easy handle, or of a transfer (`CURLE_*`).
    package init(_ code: CURLcode, message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { "curl error \(code.rawValue): \(message)" }

    /// The server closed the connection without answering: Traccar's way of refusing a payload it cannot decode.
    package var isNoResponse: Bool { code == CURLE_GOT_NOTHING }
    package var isConnectFailure: Bool {
        code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST
            || code == CURLE_COULDNT_RESOLVE_PROXY
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

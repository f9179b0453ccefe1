import CCurl

/// A failed transfer: curl's code and text. HTTP statuses are not errors
/// here; the destination decides what each one means.
package struct CurlError: Error, Sendable, CustomStringConvertible {
    package let code: UInt32
    package let message: String

    package var description: String { "curl error \(code): \(message)" }

    /// The server closed the connection without answering: Traccar's way of refusing a payload it cannot decode.
    package var isNoResponse: Bool { code == CURLE_GOT_NOTHING.rawValue }
    package var isTimeout: Bool { code == CURLE_OPERATION_TIMEDOUT.rawValue }
    package var isConnectFailure: Bool {
        code == CURLE_COULDNT_CONNECT.rawValue || code == CURLE_COULDNT_RESOLVE_HOST.rawValue || code == CURLE_COULDNT_RESOLVE_PROXY.rawValue
    }
}

/// The one place curl status codes become Swift errors.
func check(_ code: CURLcode, _ errorBuffer: UnsafePointer<CChar>? = nil) throws(CurlError) {
    guard code != CURLE_OK else { return }
    var message = String(cString: curl_easy_strerror(code))
    if let errorBuffer, errorBuffer.pointee != 0 {
        message = String(cString: errorBuffer)
    }
    throw CurlError(code: code.rawValue, message: message)
}

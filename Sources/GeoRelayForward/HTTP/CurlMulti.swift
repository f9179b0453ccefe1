import CCurl
import Glibc

/// Owns one curl multi handle: many transfers driven from one thread, their
/// connections kept alive in the multi's shared pool.
///
/// Not `Sendable`, except `wakeup()`, which curl allows from any thread.
package final class CurlMulti {
    let handle: UnsafeMutableRawPointer

    init() throws(CurlError) {
        guard let handle = curl_multi_init() else {
            throw CurlError(multi: CURLM_OUT_OF_MEMORY, message: "curl_multi_init failed")
        }
        self.handle = handle
    }

    deinit {
        curl_multi_cleanup(handle)
    }

    func add(_ easy: CurlEasy) throws(CurlError) {
        try check(curl_multi_add_handle(handle, easy.handle))
    }

    func remove(_ easy: CurlEasy) {
        curl_multi_remove_handle(handle, easy.handle)
    }

    /// Moves every transfer forward as far as it can go without blocking.
    func perform() throws(CurlError) {
        var running: Int32 = 0
        try check(curl_multi_perform(handle, &running))
    }

    /// Waits until a transfer can move (or `timeoutMs`, or `wakeup()`).
    func poll(timeoutMs: Int32) throws(CurlError) {
        try check(curl_multi_poll(handle, nil, 0, timeoutMs, nil))
    }

    /// Ends a `poll` early; safe from any thread.
    func wakeup() {
        curl_multi_wakeup(handle)
    }

    /// A handle for `wakeup()` that other threads may hold; valid while this multi lives.
    var waker: Waker { Waker(handle: handle) }

    struct Waker: @unchecked Sendable {
        let handle: UnsafeMutableRawPointer
        func wake() { curl_multi_wakeup(handle) }
    }

    /// The next finished transfer: its easy handle and curl's result code.
    func nextFinished() -> (easy: UnsafeMutableRawPointer, code: CURLcode)? {
        var left: Int32 = 0
        while let message = curl_multi_info_read(handle, &left) {
            if message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle {
                return (easy, message.pointee.data.result)
            }
        }
        return nil
    }
}

@available(*, unavailable)
extension CurlMulti: Sendable {}

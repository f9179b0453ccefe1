import CCurl
import GeoRelayCore
import Glibc

/// One connection to a destination that libcurl opens and secures but does not speak HTTP on:
/// a `CURLOPT_CONNECT_ONLY` easy handle. libcurl does DNS, TCP, the TLS handshake and the
/// certificate checks (exactly as `CurlEasy` does them, through the same `setTLS`); the caller
/// frames requests (`HTTP1Request`) and parses responses (`HTTP1ResponseParser`) itself, which is
/// how requests are pipelined now that libcurl no longer pipelines.
///
/// Non-blocking after `connect()`: `send` and `receive` take or give what the socket allows, and
/// `wait` polls the socket.
///
/// - Important: over TLS, curl may already hold decrypted bytes, so the socket can be idle while
///   data is waiting. After `wait` says readable, call `receive` until it returns nil (would block)
///   before waiting again; waiting while `receive` still had bytes can stall the connection.
/// - Important: when `send` takes fewer bytes than offered (0 when it would block), offer the rest
///   again, starting at the first byte not taken and no shorter: OpenSSL requires a write it could
///   not finish to be retried with the same bytes. Keep them in place until they are taken.
/// - Important: one connection per instance. After `receive` returns 0 (the peer closed) or any
///   call throws, the connection is finished; make a new `CurlConnection` to reconnect.
///
/// Not `Sendable`: confine it to one thread.
package final class CurlConnection {
    private let handle: UnsafeMutableRawPointer
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
    private var socket: curl_socket_t = -1
    /// Application bytes sent (before TLS): what requests cost, as `CurlEasy` counts them.
    package private(set) var bytesSent = 0
    /// Application bytes received (after TLS).
    package private(set) var bytesReceived = 0
    /// Bills the connection's socket; the engine samples it at each hand-over (`sampleLive`).
    private let meter: WireMeter?
    /// Bills the name lookup curl starts for the host.
    private var lookups: LookupBill?
    private let clock: any RelayClock

    /// Sets the connection up without connecting.
    /// - Parameters:
    ///   - url: the destination; only its scheme, host and port matter here.
    ///   - tls: how an HTTPS server is verified, as for `CurlEasy`.
    ///   - connectTimeoutSeconds: the bound on DNS, TCP and the TLS handshake together.
    ///   - meter: what the connection costs the link is billed there.
    ///   - clock: what a wait's deadline is kept on (the poll itself is the kernel's).
    package init(
        url: String, tls: Configuration.TLSSettings = .init(), connectTimeoutSeconds: Double = 10,
        meter: WireMeter? = nil, clock: any RelayClock = SystemClock()
    ) throws(CurlError) {
        self.clock = clock
        _ = CurlEasy.globalInit
        guard let handle = curl_easy_init() else {
            errorBuffer.deallocate()
            throw CurlError(CURLE_FAILED_INIT, message: "curl_easy_init failed")
        }
        self.handle = handle
        errorBuffer.initialize(to: 0)
        try check(georelay_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer))
        try check(georelay_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1))
        try check(georelay_curl_setopt_long(handle, CURLOPT_TCP_KEEPALIVE, 1))
        try check(georelay_curl_setopt_long(handle, CURLOPT_CONNECT_ONLY, 1))
        // ALPN must offer HTTP/1.1 only: a server that picked h2 would read our HTTP/1.1 as garbage.
        try check(georelay_curl_setopt_long(handle, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1))
        try check(georelay_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(connectTimeoutSeconds * 1000)))
        try check(georelay_curl_setopt_string(handle, CURLOPT_URL, url))
        try CurlEasy.setTLS(tls, on: handle)
        self.meter = meter
        lookups = try meter?.attach(to: handle)
        lookups?.host(of: url)
    }

    deinit {
        curl_easy_cleanup(handle)
        errorBuffer.deallocate()
    }

    /// Whether `connect()` succeeded.
    package var isConnected: Bool { socket != -1 }

    /// The socket, for a caller that polls many connections at once (see the TLS note on the type).
    package var descriptor: Int32 { socket }

    /// Resolves, connects and, for `https`, does the TLS handshake and verifies the certificate,
    /// blocking the calling thread for at most the connect timeout.
    /// - Throws: `CurlError` (`isConnectFailure`, `CURLE_OPERATION_TIMEDOUT`, or a TLS/certificate code).
    package func connect() throws(CurlError) {
        precondition(!isConnected, "CurlConnection.connect() called twice: make a new connection instead")
        errorBuffer.pointee = 0
        try check(curl_easy_perform(handle), errorBuffer)
        var active: curl_socket_t = -1
        try check(georelay_curl_getinfo_socket(handle, CURLINFO_ACTIVESOCKET, &active), errorBuffer)
        guard active != -1 else { throw CurlError(CURLE_COULDNT_CONNECT, message: "no socket after connecting") }
        socket = active
    }

    /// Sends what the connection takes of `bytes` now.
    /// - Returns: the number of bytes taken; 0 when the socket would block (wait for writable).
    /// - Throws: `CurlError` when the connection failed (reset, broken pipe).
    package func send(_ bytes: UnsafeRawBufferPointer) throws(CurlError) -> Int {
        precondition(isConnected, "CurlConnection.send before connect()")
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return 0 }
        errorBuffer.pointee = 0
        var sent = 0
        let code = curl_easy_send(handle, base, bytes.count, &sent)
        if code == CURLE_AGAIN { return 0 }
        try check(code, errorBuffer)
        bytesSent += sent
        return sent
    }

    /// Sends what the connection takes now of `bytes` from `offset` on, the bytes left in place
    /// for the next call (see the type's note on short sends).
    /// - Returns: the number of bytes taken; 0 when the socket would block.
    package func send(_ bytes: [UInt8], from offset: Int) throws(CurlError) -> Int {
        try bytes.withUnsafeBytes { raw -> Result<Int, CurlError> in
            do throws(CurlError) {
                return .success(try send(UnsafeRawBufferPointer(rebasing: raw[offset...])))
            } catch {
                return .failure(error)
            }
        }.get()
    }

    /// Reads what has arrived into `buffer`.
    /// - Returns: the number of bytes read; nil when nothing is there now (wait for readable);
    ///   0 when the peer closed the connection.
    /// - Throws: `CurlError` when the connection failed (reset, a TLS error).
    package func receive(into buffer: UnsafeMutableRawBufferPointer) throws(CurlError) -> Int? {
        precondition(isConnected, "CurlConnection.receive before connect()")
        precondition(!buffer.isEmpty, "CurlConnection.receive into an empty buffer")
        errorBuffer.pointee = 0
        var received = 0
        let code = curl_easy_recv(handle, buffer.baseAddress, buffer.count, &received)
        if code == CURLE_AGAIN { return nil }
        try check(code, errorBuffer)
        bytesReceived += received
        return received
    }

    /// Waits until the socket is readable or writable (as asked) or `timeout` passes, retrying
    /// interrupted polls within the same deadline. An error or hang-up on the socket reports as
    /// ready, so the next `send` or `receive` reports it.
    /// - Important: see the type's note on TLS: drain `receive` before waiting for readable.
    /// - Returns: which of the asked conditions hold; both false when the time ran out.
    package func wait(readable: Bool, writable: Bool, timeout: Duration) throws(CurlError) -> (
        readable: Bool, writable: Bool
    ) {
        precondition(isConnected, "CurlConnection.wait before connect()")
        precondition(readable || writable, "CurlConnection.wait for nothing")
        precondition(timeout >= .zero, "CurlConnection.wait: negative timeout")
        var events: Int16 = 0
        if readable { events |= Int16(POLLIN) }
        if writable { events |= Int16(POLLOUT) }
        let deadline = clock.now() + timeout
        var descriptor = pollfd(fd: socket, events: events, revents: 0)
        let result: Int32
        do throws(SystemError) {
            // An interrupted poll runs again with what is left of the deadline, not the whole timeout.
            result = try syscall("poll") { poll(&descriptor, 1, Self.milliseconds(clock.now().duration(to: deadline))) }
        } catch {
            throw CurlError(CURLE_RECV_ERROR, message: "\(error)")
        }
        if result == 0 { return (false, false) }
        let revents = Int32(descriptor.revents)
        if revents & Int32(POLLNVAL) != 0 {
            throw CurlError(CURLE_RECV_ERROR, message: "poll: the connection's socket is closed")
        }
        let failed = revents & (Int32(POLLERR) | Int32(POLLHUP)) != 0
        return (
            readable && (revents & Int32(POLLIN) != 0 || failed),
            writable && (revents & Int32(POLLOUT) != 0 || failed)
        )
    }

    /// poll's timeout: rounded up, so a wait never returns early and spins.
    private static func milliseconds(_ remaining: Duration) -> Int32 {
        guard remaining > .zero else { return 0 }
        let (seconds, attoseconds) = remaining.components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: milliseconds)
    }
}

@available(*, unavailable)
extension CurlConnection: Sendable {}

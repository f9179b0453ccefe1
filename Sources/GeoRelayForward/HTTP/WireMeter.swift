import CCurl
import GeoRelayCore
import GeoRelaySpool
import Glibc
import Synchronization

/// What one destination's connections cost on the link, counted as a metered plan bills it:
/// IP packets, not HTTP bytes.
///
/// Every socket libcurl opens for the destination (its requests, its probes, its logins, the
/// pipelined and Teltonika connections, failed connection attempts too) is opened here
/// (`CURLOPT_OPENSOCKETFUNCTION`) and closed here (`CURLOPT_CLOSESOCKETFUNCTION`); the kernel's
/// per-socket counters (`TCP_INFO`: payload bytes each way, retransmissions included, and
/// segments each way; see `Snapshot` for the little they leave out) are read when a transfer ends, at every hand-over of a round's progress
/// (`sampleLive`) and as each socket closes. Each segment is billed its IPv4 and TCP headers
/// with the timestamp option Linux sends (52 bytes; 72 over IPv6), so handshakes, bare ACKs and
/// TLS records all count. HTTP bytes were 47 % short of an interface's counters on a 64 kbit/s
/// link, and about 6× short with a connection per request. A connection attempt refused on this
/// side of the uplink crossed nothing and is not billed: a socket that carried no payload and
/// closed within `ConnectCheck.answeredHere` of opening (a refusal by this host or a terminal's
/// router while its satellite is down) costs nothing, and its SYN is billed only once it has
/// outlived that (`ConnectCheck` times its bare attempts the same way).
///
/// A name lookup (UDP, made inside libcurl's resolver, which caches each name for a minute) is
/// billed when curl starts one, as `LookupBill` estimates it; where the system resolver answers
/// from a cache of its own that overcounts a little, never under. Where an uplink carries nothing
/// but the relay's traffic, counting by the interface's own counters (`uplinks[].count:
/// "interface"`) measures them instead.
package final class WireMeter: Sendable {
    /// A socket's counters at the last look, and what was billed for what they cannot show.
    struct Snapshot: Sendable {
        var bytesSent: UInt64 = 0
        var bytesReceived: UInt64 = 0
        var bytesRetransmitted: UInt64 = 0
        var segmentsOut: UInt64 = 0
        var segmentsIn: UInt64 = 0
        var headerBytes: UInt64
        /// The peer's retransmissions billed so far (`peerResentEstimate`), never taken back.
        var peerResentBilled: UInt64 = 0
        var handshakeBilled = false
        /// When the socket opened (monotonic): an attempt answered sooner than a link's round trip
        /// never crossed it.
        var openedNs: UInt64 = 0

        /// The SYN's and the SYN-ACK's options beyond the timestamp every segment is billed
        /// (maximum segment size, SACK permitted, window scale: 8 bytes each way).
        static let handshakeOptions: UInt64 = 16

        /// What the peer sent twice, as far as this side can tell. The kernel counts a segment
        /// received again (`segs_in`) but not its payload (`bytes_received` is what arrived
        /// in order), and keeps no count of duplicates. They come from the same link and queue
        /// as this side's own retransmissions, which it does count, so the peer is taken to
        /// resend what it sends at the rate this side resends. Low where the peer's answers are
        /// small and wait on this side's requests: on a day at sea the server resent 1,558 B and
        /// this estimated 690 B (the meter 1.0 % short of a capture, 1.8 % without it).
        var peerResentEstimate: UInt64 {
            guard bytesRetransmitted > 0, bytesSent > bytesRetransmitted else { return 0 }
            let rate = Double(bytesRetransmitted) / Double(bytesSent - bytesRetransmitted)
            let estimate = (Double(bytesReceived) * rate).rounded(.down)
            // Below what was received, so within UInt64 (a NaN or a rounding up to 2^64 is not):
            // never more than the bytes received.
            return estimate < Double(bytesReceived) ? UInt64(estimate) : bytesReceived
        }

        /// Takes the kernel's counters `now` after this look, with what they leave out billed
        /// once: the handshake's options when the connection is seen carrying data, and the
        /// peer's retransmissions as the estimate grows.
        func advanced(to now: georelay_tcp_counts) -> Snapshot {
            var next = self
            next.bytesSent = now.bytes_sent
            next.bytesReceived = now.bytes_received
            next.bytesRetransmitted = now.bytes_retrans
            next.segmentsOut = now.segs_out
            next.segmentsIn = now.segs_in
            next.handshakeBilled = handshakeBilled || (now.bytes_sent > 0 && now.segs_in > 0)
            next.peerResentBilled = max(peerResentBilled, next.peerResentEstimate)
            return next
        }

        /// Bytes on the wire since `earlier`, headers included.
        func billed(since earlier: Snapshot) -> UInt64 {
            func delta(_ now: UInt64, _ then: UInt64) -> UInt64 { now >= then ? now - then : 0 }
            return delta(bytesSent, earlier.bytesSent) + delta(bytesReceived, earlier.bytesReceived)
                + (delta(segmentsOut, earlier.segmentsOut) + delta(segmentsIn, earlier.segmentsIn)) * headerBytes
                + delta(peerResentBilled, earlier.peerResentBilled)
                + (handshakeBilled && !earlier.handshakeBilled ? Self.handshakeOptions : 0)
        }
    }

    private struct State {
        var live: [Int32: Snapshot] = [:]
        /// Sockets handed to another meter (`handOver`): their close, which curl still reports
        /// here, is that meter's.
        var handedOver: [Int32: WireMeter] = [:]
        /// Billed since the last `take`.
        var pending: UInt64 = 0
        var total: UInt64 = 0
    }

    private let state = Mutex(State())
    /// What a socket's life is timed on, to tell an attempt answered on this side.
    private let clock: any RelayClock

    /// - Parameter clock: the relay's (the system's: the sockets are real).
    package init(clock: any RelayClock = SystemClock()) {
        self.clock = clock
    }

    /// Billed bytes since the last take: what a progress hand-over records as its wire bytes.
    package func take() -> Int {
        state.withLock { state in
            defer { state.pending = 0 }
            return Int(clamping: state.pending)
        }
    }

    /// Billed since the last take, every live socket read now; nothing is taken.
    package func unbilled() -> Int {
        sampleLive()
        return state.withLock { Int(clamping: $0.pending) }
    }

    /// Everything billed since the meter was made.
    package var total: Int { state.withLock { Int(clamping: $0.total) } }

    /// Reads every live socket's counters. Holding the lock while reading keeps a socket from
    /// being closed (and its number reused) under the read: closing takes the lock first.
    package func sampleLive() {
        state.withLock { state in
            for fd in Array(state.live.keys) { sample(fd, in: &state) }
        }
    }

    /// Reads one socket's counters (after a transfer on it ended).
    func sample(_ fd: Int32) {
        state.withLock { sample(fd, in: &$0) }
    }

    private func sample(_ fd: Int32, in state: inout State) {
        guard let last = state.live[fd] else { return }
        let counts = georelay_read_tcp_counts(fd)
        guard counts.ok != 0, !answeredHere(last, counts) else { return }
        let now = last.advanced(to: counts)
        let billed = now.billed(since: last)
        state.pending &+= billed
        state.total &+= billed
        state.live[fd] = now
    }

    /// Makes `other` bill the socket `fd` from now on, from where this meter last looked (a
    /// connection the check opened, kept for a round: `SpareConnection`). Take this meter's
    /// bill first: what it counted so far stays here.
    func handOver(_ fd: Int32, to other: WireMeter) {
        let snapshot = state.withLock { state -> Snapshot? in
            guard var snapshot = state.live.removeValue(forKey: fd) else { return nil }
            state.handedOver[fd] = other
            // Found to have crossed the link: what follows is billed, however young the socket.
            snapshot.openedNs = 0
            return snapshot
        }
        guard let snapshot else { return }
        other.state.withLock { $0.live[fd] = snapshot }
    }

    /// Bills bytes counted elsewhere: a name lookup curl started, or what another meter measured
    /// and found to have crossed the link (`ConnectCheck`).
    func bill(_ bytes: Int) {
        guard bytes > 0 else { return }
        state.withLock { state in
            state.pending &+= UInt64(bytes)
            state.total &+= UInt64(bytes)
        }
    }

    fileprivate func opened(_ fd: Int32, family: Int32) {
        var snapshot = Snapshot(headerBytes: family == AF_INET6 ? 72 : 52)
        snapshot.openedNs = clock.monotonicNs()
        state.withLock { $0.live[fd] = snapshot }
    }

    /// Whether the socket has carried no payload and is younger than any link's round trip: what
    /// it exchanged so far (a SYN and a refusal, a handshake answered on board) stayed on this
    /// side, and is billed only if it outlives that.
    private func answeredHere(_ last: Snapshot, _ counts: georelay_tcp_counts) -> Bool {
        counts.bytes_sent == 0 && counts.bytes_received == 0
            && clock.monotonicNs() &- last.openedNs < SystemClock.nanoseconds(ConnectCheck.answeredHere)
    }

    /// The last look before the socket closes. The teardown still to come (a FIN each way and
    /// its ACK) happens after the socket is gone, so it is billed as its four segments' headers
    /// when the connection was ever established.
    fileprivate func closing(_ fd: Int32) {
        if let owner = state.withLock({ $0.handedOver.removeValue(forKey: fd) }) { return owner.closing(fd) }
        state.withLock { state in
            sample(fd, in: &state)
            if let last = state.live[fd], last.segmentsIn > 1 {
                state.pending &+= 4 * last.headerBytes
                state.total &+= 4 * last.headerBytes
            }
            state.live[fd] = nil
        }
    }

    /// The kernel's ABI values, spelled out: naming Glibc's `__socket_type` cases in this module
    /// hid `SOCK_DGRAM` from its whole-module (release) build.
    private static let stream: Int32 = 1, closeOnExec: Int32 = 0o2000000, tcp: Int32 = 6

    /// Makes `handle` open and close its sockets through this meter, and bill its name lookups
    /// through the returned `LookupBill`. The meter and the bill must outlive the handle (its
    /// owner keeps both).
    func attach(to handle: UnsafeMutableRawPointer) throws(CurlError) -> LookupBill {
        let lookups = LookupBill(meter: self)
        try check(
            georelay_curl_setopt_resolver_start_function(handle) { _, _, user in
                let lookups = Unmanaged<LookupBill>.fromOpaque(user!).takeUnretainedValue()
                lookups.meter.bill(lookups.bytes)
                return 0
            })
        try check(
            georelay_curl_setopt_pointer(
                handle, CURLOPT_RESOLVER_START_DATA, Unmanaged.passUnretained(lookups).toOpaque()))
        let opaque = Unmanaged.passUnretained(self).toOpaque()
        try check(
            georelay_curl_setopt_opensocket_function(handle) { user, purpose, address in
                guard let address, purpose == CURLSOCKTYPE_IPCXN else { return CURL_SOCKET_BAD }
                let fd = socket(
                    address.pointee.family, address.pointee.socktype | WireMeter.closeOnExec, address.pointee.protocol)
                guard fd >= 0 else { return CURL_SOCKET_BAD }
                if address.pointee.protocol == WireMeter.tcp || address.pointee.socktype == WireMeter.stream {
                    Unmanaged<WireMeter>.fromOpaque(user!).takeUnretainedValue().opened(
                        fd, family: address.pointee.family)
                }
                return fd
            })
        try check(georelay_curl_setopt_pointer(handle, CURLOPT_OPENSOCKETDATA, opaque))
        try check(
            georelay_curl_setopt_closesocket_function(handle) { user, fd in
                Unmanaged<WireMeter>.fromOpaque(user!).takeUnretainedValue().closing(fd)
                return Glibc.close(fd)
            })
        try check(georelay_curl_setopt_pointer(handle, CURLOPT_CLOSESOCKETDATA, opaque))
        return lookups
    }
}

/// What one handle's name lookups cost: the host of its URL (set as the URL changes), looked up
/// as a stub resolver does for `getaddrinfo` of any family, an A and an AAAA query and their
/// answers, each in its own IPv4 and UDP packet with an EDNS record: about 350 bytes for a name
/// of 20 characters. An address, `localhost` or a `.localhost` name costs nothing (curl and the
/// system answer them without a packet). Used on the handle's own thread only.
final class LookupBill {
    let meter: WireMeter
    private(set) var bytes = 0

    init(meter: WireMeter) {
        self.meter = meter
    }

    func host(of url: String) {
        bytes = Self.bytes(host: Self.host(of: url))
    }

    /// The host part of `scheme://[user@]host[:port][/…]`, brackets kept on an IPv6 address.
    static func host(of url: String) -> Substring {
        var rest = Substring(url)
        if let scheme = rest.firstRange(of: "://") { rest = rest[scheme.upperBound...] }
        rest = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        if rest.first == "[" { return rest.prefix { $0 != "]" } + "]" }
        return rest.prefix { $0 != ":" }
    }

    static func bytes(host: Substring) -> Int {
        let name = host.lowercased()
        if name.isEmpty || name.first == "[" || name.allSatisfy({ $0.isNumber || $0 == "." }) { return 0 }
        if name == "localhost" || name == "localhost." || name.hasSuffix(".localhost") || name.hasSuffix(".localhost.")
        {
            return 0
        }
        // IPv4 20 + UDP 8 + DNS header 12 + the name in labels (+2) + type and class 4 + EDNS OPT 11.
        let question = 55 + name.utf8.count + (name.hasSuffix(".") ? 1 : 2)
        // Two queries, two answers that repeat the question, and their records (A 16, AAAA 28).
        return 4 * question + 16 + 28
    }
}

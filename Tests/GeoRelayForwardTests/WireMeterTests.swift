import CCurl
import GeoRelayCore
import GeoRelayTestKit
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

@testable import GeoRelayForward

/// The bill as the kernel keeps it: TCP_INFO's byte and segment counters per socket.
@Suite(.offThePool) struct WireMeterTests {
    /// The struct the shim spells out reads the kernel's counters where the kernel writes them:
    /// a socket that sent 10,000 bytes says so.
    @Test func theKernelsCountersAreReadWhereTheKernelWritesThem() throws {
        let (listener, port) = try IPv4Socket.bind(
            type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0, backlog: 1)
        defer { try? listener.close() }
        let client = try #require(IPv4Socket.connect(host: "127.0.0.1", port: port))
        defer { try? client.close() }
        let server = accept(listener.number, nil, nil)
        defer { close(server) }
        let bytes = [UInt8](repeating: 7, count: 10_000)
        try bytes.withUnsafeBytes { try client.writeAll($0) }
        var received = 0
        var buffer = [UInt8](repeating: 0, count: 65536)
        while received < bytes.count {
            let n = buffer.withUnsafeMutableBytes { recv(server, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { break }
            received += n
        }
        let sent = georelay_read_tcp_counts(client.number)
        let got = georelay_read_tcp_counts(server)
        try #require(sent.ok == 1, "this kernel keeps no per-socket byte counters (before 4.19)")
        #expect(sent.bytes_sent == 10_000)
        #expect(got.bytes_received == 10_000)
        #expect(sent.segs_out >= 2, "the SYN and at least one data segment")
    }

    /// A request through libcurl is billed its HTTP bytes plus every segment's headers (the
    /// handshake, the ACKs), read after the transfer and again as the connection closes.
    @Test func aRequestIsBilledItsPacketsNotOnlyItsHTTPBytes() throws {
        let server = try HTTPTestServer { _ in HTTPTestResponse(status: 200, body: Array(repeating: 65, count: 2000)) }
        defer { server.stop() }
        let meter = WireMeter()
        var easy: CurlEasy? = try CurlEasy(meter: meter)
        let response = try #require(easy).perform(
            HTTPRequest(method: "POST", url: server.url, body: Array(repeating: 66, count: 3000)))
        #expect(response.status == 200)
        let afterRequest = meter.total
        // At least the HTTP bytes and the headers of the handshake's and the data's segments.
        #expect(
            afterRequest >= response.wireBytes + 4 * 52, "billed \(afterRequest) for \(response.wireBytes) HTTP bytes")
        #expect(
            afterRequest < response.wireBytes + 40 * 52, "billed \(afterRequest) for \(response.wireBytes) HTTP bytes")
        easy = nil // closes the connection: the FIN and its ACKs are billed too
        #expect(meter.total == afterRequest + 4 * 52)
        #expect(meter.take() == meter.total, "nothing taken yet: everything billed is pending")
        #expect(meter.take() == 0)
    }

    /// A connection attempt refused on this side of the uplink (within `ConnectCheck.answeredHere`
    /// of its opening) crossed nothing and costs nothing; one refused from beyond a link costs its
    /// SYN and RST. The refusal is loopback's; how long it took is the clock's, each of its
    /// readings a fixed step after the last, so a busy machine cannot make it look slow.
    @Test func aRefusalOnThisSideIsFreeAndOneFromBeyondTheLinkIsBilled() throws {
        let (closed, port) = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0)
        try closed.close() // bound and closed: nothing listens on the port
        let request = HTTPRequest(method: "GET", url: "http://127.0.0.1:\(port)/", connectTimeoutSeconds: 2)
        let here = WireMeter(clock: SteppingClock(step: .microseconds(100)))
        #expect(throws: CurlError.self) { try CurlEasy(meter: here).perform(request) }
        #expect(here.total == 0, "a refusal on this side billed \(here.total)")
        let beyond = WireMeter(clock: SteppingClock(step: .milliseconds(20)))
        #expect(throws: CurlError.self) { try CurlEasy(meter: beyond).perform(request) }
        #expect(beyond.total >= 2 * 52, "a refusal from beyond the link billed \(beyond.total)")
    }

    /// A name curl has to look up is billed its packets when the lookup starts, whether or not
    /// it resolves; an address is not looked up and costs nothing more than its connection.
    @Test func aNameLookupIsBilled() throws {
        let (closed, port) = try IPv4Socket.bind(type: Int32(SOCK_STREAM.rawValue), host: "127.0.0.1", port: 0)
        try closed.close()
        let meter = WireMeter()
        let easy = try CurlEasy(meter: meter)
        let name = "georelay-lookup-test.invalid" // a name that resolves nowhere (RFC 6761)
        _ = try? easy.perform(HTTPRequest(method: "GET", url: "http://\(name):\(port)/", connectTimeoutSeconds: 2))
        #expect(
            meter.total == LookupBill.bytes(host: Substring(name)),
            "billed \(meter.total): the lookup and no connection")
        let literal = WireMeter()
        _ = try? CurlEasy(meter: literal).perform(
            HTTPRequest(method: "GET", url: "http://127.0.0.1:\(port)/", connectTimeoutSeconds: 2))
        #expect(literal.total < 300, "an address costs its refused SYN only: \(literal.total)")
    }

    @Test func aLookupCostsItsQueriesAndAnswers() {
        #expect(LookupBill.host(of: "https://user:pw@traccar.example.com:5055/path?q#f") == "traccar.example.com")
        #expect(LookupBill.host(of: "tcp://[2001:db8::1]:5027") == "[2001:db8::1]")
        #expect(LookupBill.host(of: "http://10.0.0.1") == "10.0.0.1")
        for free in ["10.0.0.1", "[2001:db8::1]", "localhost", "api.localhost", ""] {
            #expect(LookupBill.bytes(host: Substring(free)) == 0, "\(free)")
        }
        // "traccar.example.com": 19 characters, 21 in labels; each packet 55 + 21.
        #expect(LookupBill.bytes(host: "traccar.example.com") == 4 * 76 + 44)
    }

    /// What the counters leave out is billed once: the handshake's options when the connection
    /// carries data, and the peer's retransmissions estimated at this side's own rate, which
    /// only grows: a later look with a lower rate takes nothing back.
    @Test func whatTheCountersLeaveOutIsBilledOnce() {
        func counts(sent: UInt64, resent: UInt64, received: UInt64, out: UInt64, in: UInt64) -> georelay_tcp_counts {
            georelay_tcp_counts(
                ok: 1, bytes_sent: sent, bytes_received: received, bytes_retrans: resent, segs_out: out, segs_in: `in`)
        }
        let opened = WireMeter.Snapshot(headerBytes: 52)
        let syn = opened.advanced(to: counts(sent: 0, resent: 0, received: 0, out: 1, in: 1))
        #expect(syn.billed(since: opened) == 2 * 52, "the handshake so far, no data: its segments only")
        // 10,600 sent of which 600 again (6 %), 2,000 received: the peer taken to have resent 120.
        let busy = syn.advanced(to: counts(sent: 10_600, resent: 600, received: 2_000, out: 12, in: 9))
        #expect(busy.billed(since: syn) == 10_600 + 2_000 + 19 * 52 + 120 + 16)
        #expect(
            busy.advanced(to: counts(sent: 10_600, resent: 600, received: 2_000, out: 12, in: 9)).billed(since: busy)
                == 0)
        // Much more sent cleanly: the rate falls to 1 %, the estimate to 40 B, and nothing is taken back.
        let clean = busy.advanced(to: counts(sent: 60_600, resent: 600, received: 4_000, out: 60, in: 30))
        #expect(clean.billed(since: busy) == 50_000 + 2_000 + 69 * 52)
        #expect(clean.peerResentBilled == 120)
        // A socket that only ever resent (every byte twice): never more than what was received.
        let lossy = opened.advanced(to: counts(sent: 100, resent: 99, received: 50, out: 3, in: 2))
        #expect(lossy.peerResentBilled == 50)
    }
}

/// A monotonic clock on which each reading is `step` after the last.
final class SteppingClock: RelayClock, @unchecked Sendable {
    private let readings = Mutex<UInt64>(1_000_000_000)
    private let step: UInt64
    init(step: Duration) { self.step = SystemClock.nanoseconds(step) }
    func nowMs() -> Int64 { 1_784_953_800_000 }
    func monotonicNs() -> UInt64 {
        readings.withLock {
            $0 += step
            return $0
        }
    }
    func sleep(untilNs deadlineNs: UInt64) async {}
    func bootID() -> String? { nil }
}

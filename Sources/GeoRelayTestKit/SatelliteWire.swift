import CLinux
import Foundation
import GeoRelayCore
import Glibc
import Synchronization

/// A satellite link as the kernel sees one: a TUN device on each side of a `NetworkLab` (`sat0`
/// on the relay's, `sat1` on the server's), and this process between them carrying each IP
/// packet across after the link's serialisation and delay, one queue each way as a modem has.
///
/// TCP runs end to end over it: its handshake, slow start, delayed acknowledgements and
/// congestion window see the satellite's round trip and the modem's queue. The fault proxy on
/// loopback hides all of that (the relay's connections end at the proxy, a loopback hop away,
/// and the proxy's own connections to the server are loopback too), which is why a drain that
/// fills the proxy's link can still leave a real one mostly idle. The route to the lab's server
/// address moves to this wire; the lab's veth uplinks stay as they are.
package final class SatelliteWire: @unchecked Sendable {
    package struct Counters: Sendable, Equatable {
        /// IP bytes carried relay → server and server → relay (headers included: what a plan bills).
        package var bytesUp = 0
        package var bytesDown = 0
        package var packetsUp = 0
        package var packetsDown = 0
        /// Packets dropped: while the link was down, or by the modem's full queue.
        package var dropped = 0
    }

    package static let relayDevice = "sat0"
    package static let serverDevice = "sat1"
    package static let relayAddress = "10.230.0.1"
    package static let serverSideAddress = "10.230.0.2"

    private let relayFD: Int32
    private let serverFD: Int32
    private let bytesPerSecond: Int
    private let latencyNs: UInt64
    /// What a modem holds before it drops: `NetworkLab.shape`'s token bucket holds as much.
    private let queueLimitBytes: Int
    private let counters = Mutex(Counters())
    /// Each packet carried, when `tracing`: when it entered the wire (monotonic), which way, its size.
    private let trace = Mutex<[(ns: UInt64, up: Bool, bytes: Int)]>([])
    package let tracing: Bool
    private let down = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    private var threads: [Thread] = []
    private let finished = DispatchSemaphore(value: 0)

    /// - Parameters:
    ///   - bytesPerSecond: each way, as a terminal's modem serialises it.
    ///   - oneWayMs: added to every packet after its serialisation.
    ///   - tracing: keep each packet's time, direction and size (`timeline`).
    package init(
        lab: NetworkLab, bytesPerSecond: Int, oneWayMs: Int, queueLimitBytes: Int = 262_144, tracing: Bool = false
    ) throws {
        self.tracing = tracing
        self.bytesPerSecond = max(1, bytesPerSecond)
        latencyNs = UInt64(max(0, oneWayMs)) * 1_000_000
        self.queueLimitBytes = queueLimitBytes
        relayFD = try lab.onRelaySide { try Self.openTUN(Self.relayDevice) }
        serverFD = try lab.onServerSide { try Self.openTUN(Self.serverDevice) }
        try lab.ip(["-n", lab.relaySide, "addr", "add", "\(Self.relayAddress)/24", "dev", Self.relayDevice])
        try lab.ip(["-n", lab.relaySide, "link", "set", Self.relayDevice, "up"])
        try lab.ip(["-n", lab.serverSide, "addr", "add", "\(Self.serverSideAddress)/24", "dev", Self.serverDevice])
        try lab.ip(["-n", lab.serverSide, "link", "set", Self.serverDevice, "up"])
        try lab.ip([
            "-n", lab.relaySide, "route", "replace", "\(lab.serverAddress)/32", "dev", Self.relayDevice, "src",
            Self.relayAddress,
        ])
        for up in [true, false] {
            let line = DelayLine()
            let (from, to) = up ? (relayFD, serverFD) : (serverFD, relayFD)
            threads.append(Thread { [self] in carry(from: from, into: line, up: up) })
            threads.append(Thread { [self] in deliver(from: line, to: to) })
        }
        for thread in threads { thread.start() }
    }

    private static func openTUN(_ name: String) throws -> Int32 {
        let fd = georelay_open_tun(name)
        guard fd >= 0 else {
            throw NetworkLab.Unavailable(reason: "cannot open TUN device \(name): \(String(cString: strerror(errno)))")
        }
        return fd
    }

    /// Down: every packet is dropped, both ways (a terminal that black-holes while its satellite
    /// is away); open connections go silent and handshakes unanswered.
    package func setDown(_ isDown: Bool) {
        down.store(isDown, ordering: .relaxed)
    }

    package var current: Counters { counters.withLock { $0 } }

    /// The packets carried so far (with `tracing`), oldest first.
    package var timeline: [(ns: UInt64, up: Bool, bytes: Int)] { trace.withLock { $0 } }

    package func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        for _ in threads { finished.wait() }
        close(relayFD)
        close(serverFD)
    }

    deinit { stop() }

    /// Reads packets from one side and queues each behind those before it: it leaves once the
    /// link has serialised it, and arrives a latency later.
    private func carry(from fd: Int32, into line: DelayLine, up: Bool) {
        defer {
            line.close()
            finished.signal()
        }
        var departure: UInt64 = 0
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !stopped.load(ordering: .relaxed) {
            var pollFD = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pollFD, 1, 50) > 0 else { continue }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { continue }
            let now = WallClock.monotonicNs()
            let queuedNs = departure > now ? departure - now : 0
            let queuedBytes = Int(queuedNs / 1_000_000) * bytesPerSecond / 1000
            if down.load(ordering: .relaxed) || queuedBytes + n > queueLimitBytes {
                counters.withLock { $0.dropped += 1 }
                continue
            }
            departure = max(departure, now) + UInt64(n) * 1_000_000_000 / UInt64(bytesPerSecond)
            counters.withLock {
                if up {
                    $0.bytesUp += n
                    $0.packetsUp += 1
                } else {
                    $0.bytesDown += n
                    $0.packetsDown += 1
                }
            }
            if tracing { trace.withLock { $0.append((now, up, n)) } }
            line.push(Array(buffer[..<n]), due: departure + latencyNs)
        }
    }

    /// Writes each packet into the other side when it is due (dropped if the link went down
    /// while it was on its way).
    private func deliver(from line: DelayLine, to fd: Int32) {
        defer { finished.signal() }
        while let (packet, due) = line.pop() {
            while case let now = WallClock.monotonicNs(), now < due { usleep(UInt32(min((due - now) / 1000, 50_000))) }
            if down.load(ordering: .relaxed) { continue }
            _ = packet.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        }
    }
}

import GeoRelayCore
import Glibc

/// The daemon's network under the rounds: connections libcurl opens and secures (DNS, TCP, TLS
/// and certificate checks: `CurlConnection`), waited on with the kernel's `poll` beside a wake
/// pipe, and the connection the link's return check kept (`SpareConnection`) taken first.
final class CurlNetwork: RoundNetwork {
    private let url: String
    private let tls: Configuration.TLSSettings
    private let connectTimeoutSeconds: Double
    private let meter: WireMeter?
    private let spare: SpareConnection?
    private let clock: any RelayClock
    private let wakeup: WakePipe
    private var descriptors: [pollfd] = []

    init(
        url: String, tls: Configuration.TLSSettings, connectTimeoutSeconds: Double, meter: WireMeter?,
        spare: SpareConnection?, clock: any RelayClock
    ) throws {
        self.url = url
        self.tls = tls
        self.connectTimeoutSeconds = connectTimeoutSeconds
        self.meter = meter
        self.spare = spare
        self.clock = clock
        wakeup = try WakePipe()
    }

    var wake: @Sendable () -> Void { wakeup.signal }

    func dropKept() {
        spare?.drop()
    }

    func open() throws(ConnectionFailure) -> any RoundConnection {
        if let kept = spare?.take(now: clock.now()) { return CurlRoundConnection(kept) }
        do throws(CurlError) {
            let connection = try CurlConnection(
                url: url, tls: tls, connectTimeoutSeconds: connectTimeoutSeconds, meter: meter, clock: clock)
            try connection.connect()
            return CurlRoundConnection(connection)
        } catch {
            throw ConnectionFailure(error.message)
        }
    }

    func wait(_ polled: [(connection: any RoundConnection, writing: Bool)], until deadline: RelayInstant?)
        -> [ConnectionReadiness]
    {
        descriptors.removeAll(keepingCapacity: true)
        descriptors.append(pollfd(fd: wakeup.readEnd, events: Int16(POLLIN), revents: 0))
        for (connection, writing) in polled {
            // Only this network's connections are handed to it.
            let descriptor = (connection as? CurlRoundConnection)?.curl.descriptor ?? -1
            descriptors.append(
                pollfd(fd: descriptor, events: Int16(POLLIN) | (writing ? Int16(POLLOUT) : 0), revents: 0))
        }
        // Computed in the call, so a poll interrupted by a signal waits only for what is left.
        // Clamped as a Double first: the conversion traps on a value out of Int32's range.
        var waitMs: Int32 {
            let ms = deadline.map { clock.now().duration(to: $0) / .milliseconds(1) + 1 } ?? 1000
            return Int32(min(1000, max(0, ms.isFinite ? ms : 1000)))
        }
        do throws(SystemError) {
            try syscall("poll") { poll(&descriptors, nfds_t(descriptors.count), waitMs) }
        } catch {
            // Nothing is ready: the driver's deadline and flags decide what comes next.
            return []
        }
        if descriptors[0].revents != 0 { wakeup.drain() }
        return descriptors.indices.dropFirst().compactMap { slot in
            let revents = descriptors[slot].revents
            guard revents != 0 else { return nil }
            return ConnectionReadiness(index: slot - 1, writable: revents & Int16(POLLOUT) != 0)
        }
    }
}

@available(*, unavailable)
extension CurlNetwork: Sendable {}

/// A libcurl connection behind the seam: its errors as the round reads them.
final class CurlRoundConnection: RoundConnection {
    let curl: CurlConnection

    init(_ curl: CurlConnection) {
        self.curl = curl
    }

    func send(_ bytes: [UInt8], from offset: Int) throws(ConnectionFailure) -> Int {
        do throws(CurlError) {
            return try curl.send(bytes, from: offset)
        } catch {
            throw ConnectionFailure(error.message)
        }
    }

    func receive(into buffer: UnsafeMutableRawBufferPointer) throws(ConnectionFailure) -> Int? {
        do throws(CurlError) {
            return try curl.receive(into: buffer)
        } catch {
            throw ConnectionFailure(error.message)
        }
    }

    var isQuiet: Bool {
        (try? curl.wait(readable: true, writable: false, timeout: .zero)).map { !$0.readable } ?? false
    }
}

@available(*, unavailable)
extension CurlRoundConnection: Sendable {}

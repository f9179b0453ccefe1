import GeoRelayCore
import Glibc
import Synchronization

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
    /// Whether `connect` lets handshakes run beside the driver (a Teltonika fleet's connections);
    /// false, it opens as `open` does, in the driver's turn (one lane's connection at a time).
    private let concurrentHandshakes: Bool

    init(
        url: String, tls: Configuration.TLSSettings, connectTimeoutSeconds: Double, meter: WireMeter?,
        spare: SpareConnection?, clock: any RelayClock, concurrentHandshakes: Bool = false
    ) throws {
        self.concurrentHandshakes = concurrentHandshakes
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

    /// Begins a connection whose handshake (DNS, TCP, TLS: libcurl's connect blocks) runs on a
    /// thread of its own; the wake pipe ends the driver's poll when it is over. The connection the
    /// link's return check kept goes first, open already.
    func connect() throws(ConnectionFailure) -> any RoundConnection {
        guard concurrentHandshakes else { return try open() }
        if let kept = spare?.take(now: clock.now()) { return CurlRoundConnection(kept) }
        do throws(CurlError) {
            let connection = try CurlConnection(
                url: url, tls: tls, connectTimeoutSeconds: connectTimeoutSeconds, meter: meter, clock: clock)
            return CurlRoundConnection(handshake: CurlHandshake(connection, done: wakeup.signal))
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
            // A connection still in its handshake has no descriptor yet: poll skips a negative one.
            let descriptor = (connection as? CurlRoundConnection)?.curl?.descriptor ?? -1
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

/// A libcurl connection behind the seam: its errors as the round reads them. One `connect`
/// began is not usable until its handshake is over (`progress`).
final class CurlRoundConnection: RoundConnection {
    private var opened: CurlConnection?
    private let handshake: CurlHandshake?

    init(_ curl: CurlConnection) {
        opened = curl
        handshake = nil
    }

    init(handshake: CurlHandshake) {
        opened = nil
        self.handshake = handshake
    }

    /// The open connection; nil while its handshake runs (or after it failed).
    var curl: CurlConnection? {
        if opened == nil { opened = handshake?.connection }
        return opened
    }

    var progress: ConnectProgress { opened != nil ? .open : handshake?.progress ?? .open }

    func send(_ bytes: [UInt8], from offset: Int) throws(ConnectionFailure) -> Int {
        guard let curl else { throw ConnectionFailure("not connected") }
        do throws(CurlError) {
            return try curl.send(bytes, from: offset)
        } catch {
            throw ConnectionFailure(error.message)
        }
    }

    func receive(into buffer: UnsafeMutableRawBufferPointer) throws(ConnectionFailure) -> Int? {
        guard let curl else { throw ConnectionFailure("not connected") }
        do throws(CurlError) {
            return try curl.receive(into: buffer)
        } catch {
            throw ConnectionFailure(error.message)
        }
    }

    var isQuiet: Bool {
        guard let curl else { return false }
        return (try? curl.wait(readable: true, writable: false, timeout: .zero)).map { !$0.readable } ?? false
    }
}

/// A libcurl connect on a thread of its own. The connection is the thread's until the handshake
/// is over, then the driver's alone (as `CurlConnection` asks: one thread at a time).
final class CurlHandshake: Sendable {
    private struct Handed: @unchecked Sendable {
        let connection: CurlConnection
    }

    private enum State: Sendable {
        case connecting
        case open(Handed)
        case failed(String)
    }

    private let state = Mutex(State.connecting)

    /// - Parameter done: called on the handshake's thread once it is over (the driver's wake).
    init(_ connection: CurlConnection, done: @escaping @Sendable () -> Void) {
        let handed = Handed(connection: connection)
        startThread(named: "georelay-connect") { [self] in
            do throws(CurlError) {
                try handed.connection.connect()
                state.withLock { $0 = .open(handed) }
            } catch {
                state.withLock { $0 = .failed(error.message) }
            }
            done()
        }
    }

    var progress: ConnectProgress {
        state.withLock {
            switch $0 {
            case .connecting: .connecting
            case .open: .open
            case .failed(let message): .failed(message)
            }
        }
    }

    /// The connection once open.
    var connection: CurlConnection? {
        state.withLock {
            if case .open(let handed) = $0 { return handed.connection }
            return nil
        }
    }
}

@available(*, unavailable)
extension CurlRoundConnection: Sendable {}

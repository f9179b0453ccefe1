import FoundationEssentials
import GeoRelayCore
import Glibc
import Synchronization

/// Which interface, and so which uplink, carries traffic to a destination now, as the kernel
/// would route it, learnt without sending anything: a UDP socket `connect(2)`ed to the
/// destination's address makes the kernel pick a route and a source address (no packet goes
/// out), `getsockname(2)` reads that address, and `getifaddrs(3)` names the interface holding it.
///
/// Cheap (no traffic, a few system calls), so `status` asks at each look and reports the route
/// as it is at that moment, including after a failover from one uplink to another.
package enum UplinkRoute {
    /// What status shows for a destination: the uplink whose interface the route leaves by, or
    /// why none (the host does not resolve, no route, an interface no uplink names).
    package enum Answer: Sendable, Equatable {
        case uplink(Configuration.Uplink)
        /// The route leaves by an interface no uplink names (often `lo` or a LAN bridge).
        case otherInterface(String)
        case unknown(String)
    }

    /// - Parameter addresses: where the running relay keeps what it resolved (`AddressCache`);
    ///   nil resolves afresh, as a one-shot `status` does.
    package static func answer(for url: String, uplinks: [Configuration.Uplink], addresses: AddressCache? = nil)
        -> Answer
    {
        guard let components = URLComponents(string: url), let host = components.host, !host.isEmpty else {
            return .unknown("no host in the destination's URL")
        }
        let port = components.port ?? (components.scheme == "https" ? 443 : 80)
        let bare = String(host.drop { $0 == "[" }.reversed().drop { $0 == "]" }.reversed())
        let address: Result<Address, Failure>
        if let addresses {
            address = addresses.address(host: bare, port: port)
        } else {
            address = resolve(host: bare, port: port)
        }
        let route = address.flatMap { interface(toward: $0, host: bare) }
        if case .failure = route { addresses?.forget(host: bare, port: port) }
        switch route {
        case .success(let name):
            if let uplink = uplinks.first(where: { $0.interface == name }) { return .uplink(uplink) }
            return .otherInterface(name)
        case .failure(let reason):
            return .unknown(reason.message)
        }
    }

    package struct Failure: Error, Sendable, Equatable {
        package var message: String
    }

    /// A destination's address as the resolver gave it: the first of its answers.
    package struct Address: @unchecked Sendable {
        fileprivate var storage: sockaddr_storage
        fileprivate var length: socklen_t
    }

    /// Resolves `host` as the system does (a literal address asks nobody; a name may send a DNS
    /// query over the uplink itself, which is why the running relay caches the answer).
    package static func resolve(host: String, port: Int) -> Result<Address, Failure> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(host, String(port), &hints, &list)
        guard resolved == 0, let first = list else {
            return .failure(Failure(message: "\(host) does not resolve: \(String(cString: gai_strerror(resolved)))"))
        }
        defer { freeaddrinfo(list) }
        var address = Address(storage: sockaddr_storage(), length: first.pointee.ai_addrlen)
        withUnsafeMutableBytes(of: &address.storage) {
            $0.copyMemory(
                from: UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(first.pointee.ai_addrlen)))
        }
        return .success(address)
    }

    /// The interface the kernel would send a datagram to `host`:`port` from.
    package static func interface(toward host: String, port: Int) -> Result<String, Failure> {
        resolve(host: host, port: port).flatMap { interface(toward: $0, host: host) }
    }

    /// The interface the kernel would send a datagram to `address` from (`host` names it in errors).
    package static func interface(toward address: Address, host: String) -> Result<String, Failure> {
        var address = address
        guard let socket = try? FileDescriptor.socket(Int32(address.storage.ss_family), Int32(SOCK_DGRAM.rawValue))
        else {
            return .failure(Failure(message: "no socket: \(String(cString: strerror(errno)))"))
        }
        defer { try? socket.close() }
        let connected = withUnsafePointer(to: &address.storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket.number, $0, address.length) }
        }
        guard connected == 0 else {
            return .failure(Failure(message: "no route to \(host): \(String(cString: strerror(errno)))"))
        }
        var local = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket.number, $0, &length) }
        }
        guard named == 0 else { return .failure(Failure(message: "getsockname: \(String(cString: strerror(errno)))")) }
        guard let name = interfaceHolding(local) else {
            return .failure(Failure(message: "no interface holds the route's source address"))
        }
        return .success(name)
    }

    /// The interface one of whose addresses is `address` (the port is ignored).
    private static func interfaceHolding(_ address: sockaddr_storage) -> String? {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return nil }
        defer { freeifaddrs(list) }
        var wanted = address
        var entry = list
        while let current = entry {
            defer { entry = current.pointee.ifa_next }
            guard let candidate = current.pointee.ifa_addr,
                Int32(candidate.pointee.sa_family) == Int32(wanted.ss_family)
            else { continue }
            if sameHost(candidate, &wanted) { return String(cString: current.pointee.ifa_name) }
        }
        return nil
    }

    private static func sameHost(_ candidate: UnsafeMutablePointer<sockaddr>, _ wanted: inout sockaddr_storage) -> Bool
    {
        withUnsafeBytes(of: &wanted) { wantedBytes in
            switch Int32(candidate.pointee.sa_family) {
            case AF_INET:
                let offset = MemoryLayout<sockaddr_in>.offset(of: \sockaddr_in.sin_addr)!
                let size = MemoryLayout<in_addr>.size
                return memcmp(UnsafeRawPointer(candidate) + offset, wantedBytes.baseAddress! + offset, size) == 0
            case AF_INET6:
                let offset = MemoryLayout<sockaddr_in6>.offset(of: \sockaddr_in6.sin6_addr)!
                let size = MemoryLayout<in6_addr>.size
                return memcmp(UnsafeRawPointer(candidate) + offset, wantedBytes.baseAddress! + offset, size) == 0
            default:
                return false
            }
        }
    }
}

extension UplinkRoute.Answer {
    /// `via starlink (eth1, metered)`: how status's screen and the relay's log say it.
    package var phrase: String {
        switch self {
        case .uplink(let uplink): "via \(uplink.name) (\(uplink.interface)\(uplink.metered ? ", metered" : ""))"
        case .otherInterface(let interface): "via \(interface) (no uplink named for it)"
        case .unknown(let reason): "on no known uplink: \(reason)"
        }
    }
}

/// What the running relay resolved, per host and port, for `keep`: a route is asked for every
/// few seconds, and a name resolved as often would send a DNS query over the uplink each time
/// (over Iridium, a few hundred kilobytes a day of nothing but lookups). A failed route forgets
/// the entry, so a destination whose address moved is found again at the next look.
package final class AddressCache: Sendable {
    package static let keep: Duration = .seconds(600)
    private let entries = Mutex<[String: (address: UplinkRoute.Address, atNs: UInt64)]>([:])
    private let resolve: @Sendable (String, Int) -> Result<UplinkRoute.Address, UplinkRoute.Failure>
    private let nowNs: @Sendable () -> UInt64

    package init(
        resolve: @escaping @Sendable (String, Int) -> Result<UplinkRoute.Address, UplinkRoute.Failure> = UplinkRoute
            .resolve,
        clock: any RelayClock = SystemClock()
    ) {
        self.resolve = resolve
        self.nowNs = { clock.monotonicNs() }
    }

    package func address(host: String, port: Int) -> Result<UplinkRoute.Address, UplinkRoute.Failure> {
        let key = "\(host):\(port)"
        let now = nowNs()
        let keepNs = UInt64(Self.keep.components.seconds) * 1_000_000_000
        if let entry = entries.withLock({ $0[key] }), now - entry.atNs < keepNs { return .success(entry.address) }
        let resolved = resolve(host, port)
        if case .success(let address) = resolved { entries.withLock { $0[key] = (address, now) } }
        return resolved
    }

    package func forget(host: String, port: Int) {
        _ = entries.withLock { $0.removeValue(forKey: "\(host):\(port)") }
    }
}

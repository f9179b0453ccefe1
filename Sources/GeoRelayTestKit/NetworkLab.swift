import CLinux
import Foundation
import GeoRelayCore
import Glibc
import Synchronization

/// Two network namespaces of a test's own, joined by two links: the relay's side with two
/// uplinks (`up0` and `up1`, veth pairs) and the server's side, which holds `serverAddress` on
/// its loopback and answers over either link. Nothing leaves this machine and nothing of it is
/// visible outside the two namespaces; `deinit` deletes them, and their interfaces with them.
///
/// The route to `serverAddress` leaves the relay's side by one uplink at a time (`route(via:)`),
/// as a vessel's traffic moves from Starlink to the satellite terminal.
package final class NetworkLab: @unchecked Sendable {
    package let relaySide: String
    package let serverSide: String
    package let serverAddress = "10.210.0.1"
    /// The relay side's uplink interfaces, by index.
    package static let uplinks = ["up0", "up1"]
    private static let counter = Atomic<Int>(0)

    /// Sets the namespaces up, or throws `Unavailable` saying why not (no `ip`, no privilege to
    /// create namespaces): the caller skips loudly.
    package init() throws {
        let id = "\(getpid())-\(Self.counter.add(1, ordering: .relaxed).newValue)"
        relaySide = "grt-\(id)-r"
        serverSide = "grt-\(id)-s"
        guard FileManager.default.isExecutableFile(atPath: Self.ip) else {
            throw Unavailable(reason: "no \(Self.ip) (iproute2)")
        }
        do {
            try Self.ip(["netns", "add", relaySide])
        } catch {
            throw Unavailable(reason: "cannot create a network namespace: \(error)")
        }
        do {
            // Creating a namespace is not enough where mounts are refused: `ip netns exec` mounts /sys.
            do {
                try Self.ip(["netns", "exec", relaySide, "/bin/true"])
            } catch {
                throw Unavailable(reason: "cannot run a process in a network namespace: \(error)")
            }
            try Self.ip(["netns", "add", serverSide])
            let r = ["-n", relaySide]
            let s = ["-n", serverSide]
            // Each uplink carries IP and nothing else, as what a satellite plan bills does: the ARP
            // and IPv6 solicitations an Ethernet pair exchanges by itself stay on the LAN side of
            // a VSAT or Starlink terminal (a router) and a PPP modem has neither, so both ends know
            // each other's address for good and speak no IPv6. The interface's counters are then
            // what crossed the link (a day at sea's chatter was 1.3 % of it).
            for (index, name) in Self.uplinks.enumerated() {
                let (relayMAC, serverMAC) = ("02:00:00:00:0\(index):01", "02:00:00:00:0\(index):02")
                let (relayIP, serverIP) = ("10.20\(index).0.1", "10.20\(index).0.2")
                try Self.ip(
                    r + [
                        "link", "add", name, "address", relayMAC, "type", "veth", "peer", "name", "down\(index)",
                        "address", serverMAC, "netns", serverSide,
                    ])
                try Self.withoutIPv6(name, in: relaySide)
                try Self.withoutIPv6("down\(index)", in: serverSide)
                try Self.ip(r + ["addr", "add", "\(relayIP)/24", "dev", name])
                try Self.ip(s + ["addr", "add", "\(serverIP)/24", "dev", "down\(index)"])
                try Self.ip(r + ["link", "set", name, "up"])
                try Self.ip(s + ["link", "set", "down\(index)", "up"])
                try Self.ip(r + ["neigh", "replace", serverIP, "lladdr", serverMAC, "dev", name, "nud", "permanent"])
                try Self.ip(
                    s + ["neigh", "replace", relayIP, "lladdr", relayMAC, "dev", "down\(index)", "nud", "permanent"])
            }
            try Self.ip(r + ["link", "set", "lo", "up"])
            try Self.ip(s + ["link", "set", "lo", "up"])
            try Self.ip(s + ["addr", "add", "\(serverAddress)/32", "dev", "lo"])
            try route(via: 0)
        } catch {
            try? Self.ip(["netns", "del", relaySide])
            try? Self.ip(["netns", "del", serverSide])
            throw error
        }
    }

    /// A lab, or nil after printing `SKIPPED: what: why` where namespaces cannot be made here;
    /// any other failure setting it up is thrown.
    package static func orSkip(_ what: String) throws -> NetworkLab? {
        do {
            return try NetworkLab()
        } catch let unavailable as Unavailable {
            print("SKIPPED: \(what): \(unavailable.reason)")
            return nil
        }
    }

    deinit {
        try? Self.ip(["netns", "del", relaySide])
        try? Self.ip(["netns", "del", serverSide])
    }

    package struct Unavailable: Error, CustomStringConvertible {
        package var reason: String
        package var description: String { reason }
    }

    /// Sends the relay side's traffic to the server over uplink `index` from now on.
    package func route(via index: Int) throws {
        try Self.ip([
            "-n", relaySide, "route", "replace", "\(serverAddress)/32", "via", "10.20\(index).0.2", "dev",
            Self.uplinks[index],
        ])
    }

    /// Takes the relay side's route to the server away: its connections fail at once (unreachable).
    package func removeRoute() throws {
        try Self.ip(["-n", relaySide, "route", "del", "\(serverAddress)/32"])
    }

    /// Sends the relay side's traffic to the server to a gateway on uplink 0 that nothing answers
    /// for, as a modem whose link is down keeps its route and drops what reaches it: connections
    /// fail only after the kernel gives up finding the gateway (about 3 s), not at once.
    package func routeNowhere() throws {
        try Self.ip([
            "-n", relaySide, "route", "replace", "\(serverAddress)/32", "via", "10.200.0.99", "dev", Self.uplinks[0],
        ])
    }

    /// Caps uplink `index` at `bitsPerSecond` each way (a token bucket on both ends of its veth
    /// pair), as a narrowband satellite modem caps it. Only the rate: this kernel may have no
    /// `netem` to add delay, and what a budget counts is bytes, not time.
    package func shape(uplink index: Int, bitsPerSecond: Int) throws {
        for (namespace, device) in [(relaySide, Self.uplinks[index]), (serverSide, "down\(index)")] {
            // A queue deep enough for a burst of requests: the bucket delays, it does not drop.
            let result = try RelayProcess.run(
                Self.ip,
                [
                    "netns", "exec", namespace, Self.tc, "qdisc", "replace", "dev", device, "root",
                    "tbf", "rate", "\(bitsPerSecond)bit", "burst", "1600", "limit", "262144",
                ], timeout: .seconds(20))
            guard result.status == 0 else { throw Unavailable(reason: "tc tbf on \(device): \(result.stderr)") }
        }
    }

    /// Turns IPv6 off on `device` in `namespace` (where the kernel has IPv6 at all).
    private static func withoutIPv6(_ device: String, in namespace: String) throws {
        try ip([
            "netns", "exec", namespace, "/bin/sh", "-c",
            "f=/proc/sys/net/ipv6/conf/$0/disable_ipv6; [ ! -e \"$f\" ] || echo 1 > \"$f\"", device,
        ])
    }

    static let tc = FileManager.default.isExecutableFile(atPath: "/usr/sbin/tc") ? "/usr/sbin/tc" : "/sbin/tc"

    /// Bytes the relay side's uplink has sent and received (the kernel's interface counters).
    package func bytes(uplink index: Int) throws -> Int64 {
        try counters(uplink: index).bytes
    }

    /// The uplink's bytes as a plan bills them: the interface's less its Ethernet headers
    /// (14 bytes a frame), which a satellite or cellular link does not carry.
    package func ipBytes(uplink index: Int) throws -> Int64 {
        let counters = try counters(uplink: index)
        return counters.bytes - 14 * counters.packets
    }

    private func counters(uplink index: Int) throws -> (bytes: Int64, packets: Int64) {
        let result = try RelayProcess.run(Self.ip, ["-n", relaySide, "-j", "-s", "link", "show", Self.uplinks[index]])
        guard result.status == 0, case .array(let links)? = try? JSONParser.parse(result.stdout),
            case .object(let link)? = links.first,
            case .object(let stats)? = link["stats64"], case .object(let rx)? = stats["rx"],
            case .object(let tx)? = stats["tx"],
            case .number(let received)? = rx["bytes"], case .number(let sent)? = tx["bytes"],
            case .number(let receivedPackets)? = rx["packets"], case .number(let sentPackets)? = tx["packets"]
        else {
            throw Unavailable(
                reason: "cannot read \(Self.uplinks[index])'s counters: \(result.stdout) \(result.stderr)")
        }
        return (Int64(received + sent), Int64(receivedPackets + sentPackets))
    }

    /// Runs `body` on a thread that has joined the server's namespace: sockets it opens (a fake
    /// server's listener) live there; threads it starts are born there.
    package func onServerSide<T: Sendable>(_ body: @escaping @Sendable () throws -> T) throws -> T {
        try inNamespace(serverSide, body)
    }

    /// As `onServerSide`, on the relay's side (a socket watching its routes).
    package func onRelaySide<T: Sendable>(_ body: @escaping @Sendable () throws -> T) throws -> T {
        try inNamespace(relaySide, body)
    }

    private func inNamespace<T: Sendable>(_ namespace: String, _ body: @escaping @Sendable () throws -> T) throws -> T {
        let path = "/var/run/netns/\(namespace)"
        let result = Mutex<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            defer { done.signal() }
            let joined: Result<T, any Error> = Result {
                let fd = open(path, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else {
                    throw Unavailable(reason: "cannot open \(path): \(String(cString: strerror(errno)))")
                }
                defer { close(fd) }
                guard georelay_join_network_namespace(fd) == 0 else {
                    throw Unavailable(reason: "setns(\(path)): \(String(cString: strerror(errno)))")
                }
                return try body()
            }
            result.withLock { $0 = joined }
        }
        thread.start()
        done.wait()
        return try result.withLock { $0! }.get()
    }

    /// The command line that runs `arguments` inside the relay's namespace.
    package func commandOnRelaySide(_ arguments: [String]) -> (executable: String, arguments: [String]) {
        (Self.ip, ["netns", "exec", relaySide] + arguments)
    }

    /// Runs `ip` with `arguments` (for the lab's own devices: `SatelliteWire`).
    func ip(_ arguments: [String]) throws { try Self.ip(arguments) }

    static let ip = FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip") ? "/usr/sbin/ip" : "/sbin/ip"

    private static func ip(_ arguments: [String]) throws {
        let result = try RelayProcess.run(ip, arguments, timeout: .seconds(20))
        guard result.status == 0 else {
            throw Unavailable(
                reason:
                    "ip \(arguments.joined(separator: " ")): \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))"
            )
        }
    }
}

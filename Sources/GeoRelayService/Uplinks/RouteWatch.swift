import CLinux
import GeoRelayCore
import Glibc
import Synchronization

/// Wakes the uplink monitor when the kernel announces that a link, an address or a route came
/// or went (a NETLINK_ROUTE socket on the link and route groups), so a failover from Starlink
/// to the satellite terminal is seen at once rather than at the next periodic look, and the
/// bytes after it are put on the right uplink.
///
/// The messages are only a wake-up (the monitor then asks for the routes it cares about), so
/// their content is never parsed; a burst of them is one wake. `run()` reads on a thread of its
/// own, which polls so that cancelling it ends it within half a second.
package final class RouteWatch: Sendable {
    /// Every change the kernel announces (a route, an address, a link): the uplink monitor and the
    /// forwarders waiting for a link to come back each subscribe.
    package let changed = WakeBroadcast()
    /// Wakes so far (a burst of announcements is one).
    package var wakes: Int { wakeCount.load(ordering: .relaxed) }
    private let wakeCount = Atomic<Int>(0)
    private let socket: FileDescriptor
    private let stopped = Atomic<Bool>(false)

    package init() throws(SystemError) {
        let fd = georelay_route_watch_socket()
        guard fd >= 0 else { throw SystemError(call: "socket(AF_NETLINK, NETLINK_ROUTE)", errno: errno) }
        socket = FileDescriptor(adopting: fd)
    }

    /// Reads the kernel's announcements until the task is cancelled. The socket is open from
    /// `init` on, so an announcement made before this starts is still read. Once only.
    package func run() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (ended: CheckedContinuation<Void, Never>) in
                startThread(named: "georelay.routes") { [self] in
                    readUntilStopped()
                    ended.resume()
                }
            }
        } onCancel: {
            stopped.store(true, ordering: .relaxed)
        }
    }

    private func readUntilStopped() {
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while !stopped.load(ordering: .relaxed) {
            var poller = pollfd(fd: socket.number, events: Int16(POLLIN), revents: 0)
            guard (try? syscall("poll") { poll(&poller, 1, 500) }) ?? 0 > 0 else { continue }
            // Drained whole: a burst of announcements (an interface going takes its addresses
            // and routes with it) is one wake. ENOBUFS (the kernel dropped some) is a change too.
            var woke = poller.revents & Int16(POLLERR) != 0
            draining: while true {
                do {
                    let result = try buffer.withUnsafeMutableBytes { bytes throws(SystemError) in
                        try syscall(blocking: true, "recv") {
                            recv(socket.number, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT))
                        }
                    }
                    guard case .processed(let count) = result, count > 0 else { break draining }
                    woke = true
                } catch {
                    woke = true
                    break draining
                }
            }
            if woke {
                wakeCount.add(1, ordering: .relaxed)
                changed.signal()
            }
        }
    }
}

import GeoRelayCore
import GeoRelayTestKit
import Synchronization

/// The push gateway behind the uplink: the test kit's fake (its token, login and push endpoints
/// and its checks of the wire contract) on loopback, reached by the relay's real HTTP, zstd and
/// token code. Its tokens live 24 hours on the world's time (not the relay's clock, which the
/// voyage steps); while the link is down its port refuses connections, as the terminal does; in
/// a maintenance window it answers every push 503.
final class SimulatedGateway: Sendable {
    let fake: FakePushServer
    private let port: Int
    private struct State {
        var up = true
        var unavailable = false
        /// Each device's arrivals against what was stored, in the order the relay promises.
        var order = DeliveryOrder.Follower()
        var positions = 0
        /// Points whose tracker or time the relay did not write as it should.
        var unreadable = 0
    }
    private let state = Mutex(State())
    static let tokenSeconds = 86_400.0

    /// - Parameter now: the world's time in ms since the epoch.
    init(now: @escaping @Sendable () -> Int64) throws {
        fake = try FakePushServer(now: now)
        fake.setExpiresIn(Self.tokenSeconds)
        port = fake.http.port
        let suffix = "@" + fake.expected.username
        fake.sendPoints { [weak self] points in self?.take(points, suffix: suffix) }
    }

    private func take(_ points: [FakePushServer.Point], suffix: String) {
        state.withLock { state in
            for point in points {
                guard point.trackerId.hasSuffix(suffix), let ms = Timestamp.milliseconds(fromISO8601: point.timestamp)
                else {
                    state.unreadable += 1
                    continue
                }
                state.order.arrived(String(point.trackerId.dropLast(suffix.count)), ms)
            }
            state.positions += points.count
        }
    }

    var order: DeliveryOrder.Follower { state.withLock { $0.order } }

    /// `fix` of `device` goes to the relay now: it is to arrive.
    func expect(_ device: String, _ fix: Int64) { state.withLock { $0.order.expect(device, fix) } }
    func forget(_ device: String, _ fix: Int64) { state.withLock { $0.order.forget(device, fix) } }
    var positions: Int { state.withLock { $0.positions } }
    var unreadable: Int { state.withLock { $0.unreadable } }

    /// Requests the gateway answered that changed something: quiescence waits for them to stop.
    var exchanges: Int { fake.batches.count + fake.tokensIssued + fake.logins + fake.unauthorized }

    /// Whether the link to it is up: down, its port refuses (a connection open then is cut).
    var up: Bool {
        get { state.withLock { $0.up } }
        set {
            let changed = state.withLock { state in
                defer { state.up = newValue }
                return state.up != newValue
            }
            guard changed else { return }
            if newValue {
                // The port was kept reserved while stopped, so this is the same address again.
                try? fake.http.start(port: port)
            } else {
                fake.http.stop()
            }
        }
    }

    /// A maintenance window: every push answered 503.
    var unavailable: Bool {
        get { state.withLock { $0.unavailable } }
        set {
            state.withLock { $0.unavailable = newValue }
            fake.setUnavailable(newValue)
        }
    }

    func stop() { fake.http.stop() }
}

import Foundation
import GeoRelayCore

/// A server as the network knows it: its service, and whether it listens.
package final class SimulatedServer: @unchecked Sendable {
    let service: (any SimulatedService)?
    private let lock = NSLock()
    private var listeningFlag = true

    init(_ service: (any SimulatedService)?) {
        self.service = service
    }

    /// Whether anything listens (a server stopped refuses, after a round trip).
    var listening: Bool {
        get { lock.withLock { listeningFlag && service != nil } }
        set { lock.withLock { listeningFlag = newValue } }
    }

    func accept(number: Int) -> (any SimulatedSession)? { service?.accept(connection: number) }
}

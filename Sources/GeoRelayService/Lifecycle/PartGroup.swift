import GeoRelayCore
import Synchronization

/// The relay's long-running parts (the ingest loop, the HTTP listeners, the watchdog, the uplink
/// monitor, the spool's upkeep…), each a child task of one task group, each stopped on its own and awaited,
/// in the order the shutdown needs: swift-service-lifecycle's `ServiceGroup`, reduced to what a
/// daemon with one shutdown order needs.
///
/// Why not one `cancelAll()`: the order matters. The watchdog stops before the ingest loop
/// does (systemd must not take a loop that stopped on purpose for a wedged one), intake stops
/// before the forwarders finish (what ingest still answers `ok` is stored before they read the
/// spool the last time), and the spool's upkeep stops last. Nothing is started in an
/// initialiser and no part is an unstructured task: when `run` returns, every part has ended.
package final class PartGroup: Sendable {
    /// One part: how it runs, and how it is asked to end.
    package struct Part: Sendable {
        package var name: String
        package var run: @Sendable () async -> Void
        /// Asks the part to end and returns once it has (the ingest loop answers what is in
        /// flight first); nil: the part's task is cancelled, which ends every wait in it.
        package var stop: (@Sendable () async -> Void)?

        package init(
            _ name: String, run: @escaping @Sendable () async -> Void, stop: (@Sendable () async -> Void)? = nil
        ) {
            self.name = name
            self.run = run
            self.stop = stop
        }
    }

    private struct Control: Sendable {
        /// Cancels the part's task (for a part without a `stop` of its own).
        let cancel = WakeSignal()
        /// Signalled once, when the part has returned.
        let ended = WakeSignal()
    }

    private let parts: [Part]
    private let controls: [Control]
    /// Parts already stopped (or being stopped): each is stopped and awaited once.
    private let stopped = Mutex<Set<Int>>([])

    /// - Parameter parts: in the order they stop when `run`'s body returns without stopping them.
    package init(_ parts: [Part]) {
        self.parts = parts
        controls = parts.map { _ in Control() }
    }

    /// Runs every part as a child task while `body` runs, then stops those the body did not, in
    /// the order given, and returns when all of them have ended.
    package func run<T: Sendable>(_ body: (PartGroup) async -> T) async -> T {
        await withTaskGroup(of: Void.self) { group in
            for (part, control) in zip(parts, controls) {
                group.addTask {
                    await withTaskGroup(of: Void.self) { own in
                        own.addTask { await part.run() }
                        own.addTask { await control.cancel.wait() }
                        // The part returned (on its own, or asked by its `stop`), or it is cancelled.
                        await own.next()
                        own.cancelAll()
                    }
                    control.ended.signal()
                }
            }
            let result = await body(self)
            await stop(parts.map(\.name))
            await group.waitForAll()
            return result
        }
    }

    /// Stops the named parts one after another, each awaited before the next; a part already
    /// stopped, or unknown, is passed over. Cancelling the calling task ends the waits at once
    /// (the parts' own tasks are cancelled with it).
    package func stop(_ names: [String]) async {
        for name in names {
            guard let index = parts.firstIndex(where: { $0.name == name }),
                stopped.withLock({ $0.insert(index).inserted })
            else { continue }
            if let stop = parts[index].stop {
                await stop()
            } else {
                controls[index].cancel.signal()
            }
            await controls[index].ended.wait()
        }
    }
}

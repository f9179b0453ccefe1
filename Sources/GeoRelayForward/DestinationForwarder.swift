import GeoRelayCore

/// A destination's delivery loop, whatever its protocol.
///
/// A forwarder ends in one of two ways. Asked to `finish()` (a reload, a shutdown), it starts no
/// new request, waits for the answers to those in flight and records what they settle, then
/// returns: the next generation then starts where this one stopped and sends nothing twice.
/// `abandon()` (the grace period is over) or cancelling the task drops what is still in flight at
/// once: the spool keeps those positions and sends them again, so the server may get some twice
/// (at least once, as after a crash); the forwarder logs and counts them.
///
/// - Important: one run per instance: once finished or abandoned, a forwarder stays so. A reload
///   builds new forwarders.
package protocol DestinationForwarder: Sendable {
    /// Delivers until asked to finish, abandoned, or the task is cancelled.
    func run() async
    /// Asks `run` to return once what is in flight is answered; returns at once.
    func finish()
    /// Makes `run` drop what is in flight and return; returns at once.
    func abandon()
}

/// How one forwarder is told to end: the mechanics behind `finish()` and `abandon()`.
///
/// Finishing cancels the forwarder's delivery loop. Every wait in the loop ends on cancellation
/// (the spool's wake, a backoff, a probe: nothing of a position is in flight there), while a round
/// of requests takes it as "start nothing new": it goes on until the requests in flight are
/// answered, unless `abandoned` is set, which drops them. That keeps "stop sending" and "stop
/// waiting for answers" apart with one flag, where cancellation alone could only mean both.
package final class ForwarderShutdown: Sendable {
    /// Set when abandoned: rounds drop their requests in flight.
    let abandoned = AbortFlag()
    private let finishing = WakeSignal()
    private let wake: @Sendable () -> Void

    /// - Parameter wake: ends a round's wait on the network (the engine's poll), so an abandon is seen at once.
    init(wake: @escaping @Sendable () -> Void = {}) {
        self.wake = wake
    }

    func finish() {
        finishing.signal()
    }

    func abandon() {
        abandoned.set()
        finishing.signal()
        wake()
    }

    /// Runs a forwarder's delivery loop until it is asked to finish, then cancels the loop and
    /// waits for it to end. Cancelling the calling task abandons.
    func run(_ loop: @escaping @Sendable () async -> Void) async {
        await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await loop() }
                group.addTask { await self.finishing.wait() }
                await group.next()
                group.cancelAll()
            }
        } onCancel: {
            abandon()
        }
    }
}

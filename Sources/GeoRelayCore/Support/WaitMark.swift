import Synchronization

/// One wait of a part a simulation watches (a destination's backoff, idle wait or probe), as
/// the simulation sees it: the part is quiescent from the moment its wait is registered (a sleeper
/// on the clock, a waiter on a wake, a check on the network) until the moment it is woken. The
/// wake, not the task's next run, ends it: on a loaded machine the task may run much later, and a
/// test that took the part for still waiting would move the clock past what it was about to do.
///
/// The wait primitives find the mark as a task-local, so child tasks (a wake raced against a
/// timeout) share their parent's. A mark once woken stays so: a second wait needs a mark of its own.
package final class WaitMark: Sendable {
    @TaskLocal package static var current: WaitMark?

    private enum Phase: UInt8 {
        case running = 0
        case waiting = 1
        case woken = 2
    }

    private let phase = Atomic<UInt8>(Phase.running.rawValue)
    private let changed: @Sendable (_ waits: Bool) -> Void

    /// - Parameter changed: told `true` when the wait is registered, `false` when it ends.
    package init(_ changed: @escaping @Sendable (_ waits: Bool) -> Void) {
        self.changed = changed
    }

    /// A wait primitive registered the task's wait: it now waits for time, a wake or the link.
    package func begin() {
        if phase.compareExchange(
            expected: Phase.running.rawValue, desired: Phase.waiting.rawValue, ordering: .acquiringAndReleasing
        ).exchanged {
            changed(true)
        }
    }

    /// The wait is over: woken, cancelled, or left. Called before the woken task is resumed.
    package func end() {
        let was = phase.exchange(Phase.woken.rawValue, ordering: .acquiringAndReleasing)
        if was == Phase.waiting.rawValue { changed(false) }
    }
}

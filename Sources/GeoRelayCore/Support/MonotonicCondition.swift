import Glibc

/// A lock and condition variable whose timed waits run on the monotonic clock.
///
/// Foundation's `NSCondition.wait(until:)` takes a wall-clock `Date`: when the wall clock is
/// set back, a half-second wait lasts as long as the step. Owns its pthread mutex and
/// condition (allocated once, never moved).
package final class MonotonicCondition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }
    package func broadcast() { pthread_cond_broadcast(condition) }

    /// Waits (holding the lock) until broadcast or `seconds` pass on the monotonic clock.
    package func wait(seconds: Double) {
        var deadline = WallClock.monotonicDeadline(after: seconds)
        pthread_cond_timedwait(condition, mutex, &deadline)
    }
}

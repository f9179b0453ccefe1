import GeoRelayCore
import GeoRelayTestTraits
import Synchronization
import Testing

/// The clock the tests and the simulation move: sleepers wake when time reaches them, in order,
/// and a wall-clock step moves no duration.
@Suite(.offThePool) struct RelayClockTests {
    @Test func sleepersWakeWhenTheClockReachesThemInDeadlineOrder() async throws {
        let clock = SimulatedClock(wallMs: 1_784_953_800_000)
        let woken = WokenOrder()
        await withTaskGroup(of: Void.self) { group in
            for seconds in [30, 10, 20] {
                group.addTask {
                    await clock.sleep(for: .seconds(seconds))
                    await woken.append(seconds)
                }
            }
            // Bounded: three tasks asleep within ten seconds of real time.
            for _ in 0..<1000 where clock.sleeping < 3 { try? await Task.sleep(for: .milliseconds(10)) }
            #expect(clock.sleeping == 3, "the three sleepers did not go to sleep")
            clock.advance(by: .seconds(15))
            for _ in 0..<1000 where await woken.order.count < 1 { try? await Task.sleep(for: .milliseconds(10)) }
            #expect(await woken.order == [10])
            #expect(clock.sleeping == 2)
            clock.advance(by: .seconds(15))
        }
        #expect(await woken.order == [10, 20, 30])
        #expect(clock.nowMs() == 1_784_953_830_000)
    }

    /// A wait's mark ends the moment the clock or a signal wakes it, before its task runs again:
    /// a simulation that looked after the wake and saw the part still waiting would move time on.
    @Test func aWaitsMarkEndsWhenItIsWokenNotWhenItsTaskRuns() async {
        let clock = SimulatedClock(wallMs: 1_784_953_800_000)
        let signal = WakeSignal()
        let events = Mutex<[Bool]>([])
        let mark = { WaitMark { waits in events.withLock { $0.append(waits) } } }
        let byClock = mark()
        let bySignal = mark()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await WaitMark.$current.withValue(byClock) { await clock.sleep(for: .seconds(5)) } }
            group.addTask {
                await WaitMark.$current.withValue(bySignal) { await signal.wait(timeout: .seconds(60), clock: clock) }
            }
            // Bounded: both waits registered within a minute of real time (the pool may be busy).
            for _ in 0..<6000 where events.withLock({ $0.count }) < 2 { try? await Task.sleep(for: .milliseconds(10)) }
            #expect(events.withLock { $0 } == [true, true], "both waits registered, once each")
            clock.advance(by: .seconds(5))
            #expect(events.withLock { $0 } == [true, true, false], "the clock's wake ended its wait at once")
            signal.signal()
            #expect(events.withLock { $0 } == [true, true, false, false], "the signal ended its wait at once")
        }
        // Left after its wake: nothing more.
        byClock.end()
        #expect(events.withLock { $0.count } == 4)
    }

    /// A task the clock woke counts as resuming until it has run: on a loaded machine its next
    /// step may come milliseconds after the wake, and a simulation must not move time meanwhile.
    @Test func aWokenTaskIsResumingUntilItRuns() async {
        let clock = SimulatedClock(wallMs: 1_784_953_800_000)
        let executor = HeldExecutor()
        let done = Mutex(false)
        let task = Task(executorPreference: executor) {
            await clock.sleep(for: .seconds(5))
            done.withLock { $0 = true }
        }
        executor.runHeld()
        #expect(clock.sleeping == 1, "the sleeper registered on the clock")
        clock.advance(by: .seconds(5))
        #expect(clock.sleeping == 0)
        #expect(clock.resuming == 1, "woken, and held by its executor")
        #expect(!done.withLock { $0 })
        executor.runHeld()
        await task.value
        #expect(done.withLock { $0 })
        #expect(clock.resuming == 0, "run, so no longer resuming")
        // A cancelled sleeper is woken too, and counted until it runs.
        let cancelled = Task(executorPreference: executor) { await clock.sleep(for: .seconds(60)) }
        executor.runHeld()
        cancelled.cancel()
        #expect(clock.resuming == 1)
        executor.runHeld()
        await cancelled.value
        #expect(clock.resuming == 0)
    }

    @Test func aWallClockStepMovesNoDurationAndAPastDeadlineReturnsAtOnce() async {
        let clock = SimulatedClock(wallMs: 1_784_953_800_000)
        let before = clock.monotonicNs()
        clock.stepWall(byMs: -3_600_000)
        #expect(clock.nowMs() == 1_784_950_200_000)
        #expect(clock.monotonicNs() == before)
        await clock.sleep(for: .zero)
        await clock.sleep(untilNs: before - 1)
        #expect(clock.sleeping == 0)
    }

    @Test func aCancelledSleeperReturns() async {
        let clock = SimulatedClock(wallMs: 0)
        let task = Task { await clock.sleep(for: .seconds(3600)) }
        for _ in 0..<1000 where clock.sleeping < 1 { try? await Task.sleep(for: .milliseconds(10)) }
        task.cancel()
        await task.value
        #expect(clock.sleeping == 0)
    }

    @Test func durationsConvertWithoutATrap() {
        #expect(SystemClock.nanoseconds(.seconds(-5)) == 0)
        #expect(SystemClock.nanoseconds(.milliseconds(1500)) == 1_500_000_000)
        #expect(SystemClock.nanoseconds(.seconds(Int64.max)) == .max)
    }
}

actor WokenOrder {
    var order: [Int] = []
    func append(_ seconds: Int) { order.append(seconds) }
}

/// An executor that runs its jobs only when told, on the caller's thread: a task that is
/// scheduled and has not run yet, on demand.
final class HeldExecutor: TaskExecutor, @unchecked Sendable {
    private let jobs = Mutex<[UnownedJob]>([])

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        jobs.withLock { $0.append(job) }
    }

    /// Runs every job enqueued so far, and those they enqueue.
    func runHeld() {
        while let job = jobs.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) {
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

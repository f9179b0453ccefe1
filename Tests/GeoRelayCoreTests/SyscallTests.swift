import Dispatch
import GeoRelayCore
import GeoRelayTestTraits
import Glibc
import Synchronization
import Testing

/// `syscall`'s three answers: a result, a would-block that is a value and not an error, and
/// every other failure thrown; with `EINTR` retried in between.
@Suite(.offThePool) struct SyscallTests {
    @Test func wouldBlockIsAValueNotAnError() throws {
        let pipe = try Pipe(nonBlocking: true)
        var buffer = [UInt8](repeating: 0, count: 16)
        let nothing = try buffer.withUnsafeMutableBytes { try pipe.reading.read(into: $0) }
        #expect(nothing == .wouldBlock)
        try pipe.writing.writeAll([7, 8, 9])
        let some = try buffer.withUnsafeMutableBytes { try pipe.reading.read(into: $0) }
        #expect(some == .processed(3))
        #expect(buffer.prefix(3) == [7, 8, 9])
    }

    @Test func wouldBlockIsThrownWhenTheCallerExpectedToBlock() throws {
        let pipe = try Pipe(nonBlocking: true)
        var byte: UInt8 = 0
        let error = #expect(throws: SystemError.self) {
            _ = try syscall(blocking: false, "read", "the test's pipe") { Glibc.read(pipe.reading.number, &byte, 1) }
        }
        #expect(error?.errno == EAGAIN)
        #expect(error?.description == "read the test's pipe: \(String(cString: strerror(EAGAIN)))")
    }

    @Test func otherFailuresAreThrownWithTheCallAndWhere() throws {
        let pipe = try Pipe(nonBlocking: false)
        try pipe.writing.close()
        var byte: UInt8 = 1
        // The write end is closed: EBADF, not a retry and not a would-block.
        let error = #expect(throws: SystemError.self) {
            _ = try syscall(blocking: true, "write", "a closed pipe") { Glibc.write(pipe.writing.number, &byte, 1) }
        }
        #expect(error?.errno == EBADF)
        #expect(error?.call == "write" && error?.context == "a closed pipe")
    }

    /// The control: with this signal set-up, a plain read really does end with EINTR, so the
    /// next test's read would fail without the retry.
    @Test func aSignalInterruptsAPlainBlockingRead() throws {
        let pipe = try Pipe(nonBlocking: false)
        let outcome = try Interrupter.run(signals: 50) {
            var byte: UInt8 = 0
            let n = Glibc.read(pipe.reading.number, &byte, 1)
            return n < 0 ? Glibc.errno : 0
        } release: {
            try? pipe.writing.writeAll([1])
        }
        #expect(outcome == EINTR, "read ended with errno \(outcome), not EINTR")
    }

    @Test func anInterruptedReadIsRetried() throws {
        let pipe = try Pipe(nonBlocking: false)
        let handled = Interrupter.handled.load(ordering: .relaxed)
        let outcome = try Interrupter.run(signals: 20) { () -> String in
            var byte: UInt8 = 0
            do {
                let result = try withUnsafeMutableBytes(of: &byte) { try pipe.reading.read(into: $0) }
                return result == .processed(1) && byte == 42 ? "read" : "\(result)"
            } catch {
                return "\(error)"
            }
        } release: {
            try? pipe.writing.writeAll([42])
        }
        #expect(outcome == "read")
        #expect(Interrupter.handled.load(ordering: .relaxed) - handled >= 20, "every signal reached the reading thread")
    }

    /// A write taken in parts is finished: a pipe that takes at most 7 bytes a call, an
    /// interrupted call among them, and the reader gets every byte in order.
    @Test func aShortWriteIsFinished() throws {
        let pipe = try Pipe(nonBlocking: false)
        let bytes = (0..<100).map { UInt8($0) }
        var calls = 0
        try bytes.withUnsafeBytes { raw in
            try writeCompletely(raw, call: "write") { rest in
                calls += 1
                if calls == 3 {
                    errno = EINTR
                    return -1
                }
                return Glibc.write(pipe.writing.number, rest.baseAddress, min(rest.count, 7))
            }
        }
        #expect(calls == 16, "15 writes of up to 7 bytes and one interrupted call")
        var received = [UInt8](repeating: 0, count: 200)
        let read = try received.withUnsafeMutableBytes { try pipe.reading.read(into: $0) }
        #expect(read == .processed(100))
        #expect(Array(received.prefix(100)) == bytes)
    }

    @Test func aWriteThatTakesNothingIsAnErrorNotALoop() throws {
        let bytes: [UInt8] = [1, 2, 3]
        let error = #expect(throws: SystemError.self) {
            try bytes.withUnsafeBytes { raw in try writeCompletely(raw, call: "write", "a full device") { _ in 0 } }
        }
        #expect(error?.errno == EIO && error?.context == "a full device")
    }

    /// The control: one plain write into a full pipe, interrupted, returns short, so the next
    /// test's write would stop part-way without the loop.
    @Test func aSignalledPlainWriteIntoAFullPipeReturnsShort() throws {
        let pipe = try Pipe(nonBlocking: false)
        let bytes = [UInt8](repeating: 1, count: 1 << 20)
        let written = try Interrupter.run(signals: 50) {
            bytes.withUnsafeBytes { Glibc.write(pipe.writing.number, $0.baseAddress, $0.count) }
        } release: {
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            var ready = pollfd(fd: pipe.reading.number, events: Int16(POLLIN), revents: 0)
            if poll(&ready, 1, 10_000) > 0 { _ = chunk.withUnsafeMutableBytes { try? pipe.reading.read(into: $0) } }
        }
        #expect(written > 0 && written < bytes.count, "wrote \(written) of \(bytes.count) bytes")
    }

    /// A real short write: a blocking write into a full pipe, interrupted by signals while the
    /// reader is slow, returns with part of the bytes taken; `writeAll` carries on until the
    /// reader has every byte.
    @Test func aSignalledWriteIntoAFullPipeIsFinished() throws {
        let pipe = try Pipe(nonBlocking: false)
        let bytes = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let received = Mutex<[UInt8]>([])
        let outcome = try Interrupter.run(signals: 50) { () -> String in
            do {
                try pipe.writing.writeAll(bytes)
                return "written"
            } catch {
                return "\(error)"
            }
        } release: {
            // The reader starts only now: until then the pipe is full and the writer blocked.
            var chunk = [UInt8](repeating: 0, count: 4096)
            var total: [UInt8] = []
            while total.count < bytes.count {
                var ready = pollfd(fd: pipe.reading.number, events: Int16(POLLIN), revents: 0)
                guard poll(&ready, 1, 10_000) > 0 else { break } // the writer stopped early: the check below says so
                guard case .processed(let n)? = chunk.withUnsafeMutableBytes({ try? pipe.reading.read(into: $0) }),
                    n > 0
                else { break }
                total += chunk[0..<n]
            }
            received.withLock { $0 = total }
        }
        #expect(outcome == "written")
        #expect(received.withLock { $0 == bytes }, "the reader got every byte, in order")
    }
}

/// Both ends of a pipe, each owned.
struct Pipe {
    let reading: FileDescriptor
    let writing: FileDescriptor

    init(nonBlocking: Bool) throws {
        var ends: [Int32] = [0, 0]
        try syscall("pipe") { pipe(&ends) }
        reading = FileDescriptor(adopting: ends[0])
        writing = FileDescriptor(adopting: ends[1])
        if nonBlocking {
            for end in ends { _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK) }
        }
    }
}

/// Runs a blocking call on a thread of its own and sends that thread SIGUSR2, handled without
/// `SA_RESTART`, so a blocked system call returns `EINTR`; then lets the call finish.
enum Interrupter {
    /// Signals handled so far (the handler cannot capture anything).
    static let handled = Atomic<Int>(0)
    /// One test at a time owns SIGUSR2's handler.
    private static let lock = Mutex(())

    struct Timeout: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs `call` on a new thread, delivers `signals` signals to it one at a time (each
    /// handled before the next is sent) unless `call` returns first, then runs `release`
    /// (which unblocks the call) and returns what `call` returned.
    static func run<T: Sendable>(signals: Int, _ call: @escaping @Sendable () -> T, release: () -> Void) throws -> T {
        try lock.withLock { _ in
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { _ in _ = Interrupter.handled.add(1, ordering: .relaxed) }
            action.sa_flags = 0
            sigemptyset(&action.sa_mask)
            var previous = sigaction()
            sigaction(SIGUSR2, &action, &previous)
            defer { sigaction(SIGUSR2, &previous, nil) }

            let thread = Mutex<pthread_t?>(nil)
            let result = Mutex<T?>(nil)
            let started = DispatchSemaphore(value: 0)
            let finished = DispatchSemaphore(value: 0)
            // The thread waits for this before it ends, so a signal never goes to a thread that is gone.
            let mayEnd = DispatchSemaphore(value: 0)
            let done = Atomic<Bool>(false)
            let body = Body {
                // A thread starts with its creator's signal mask, and the test runner's threads block most signals.
                var unblocked = sigset_t()
                sigemptyset(&unblocked)
                sigaddset(&unblocked, SIGUSR2)
                pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
                thread.withLock { $0 = pthread_self() }
                started.signal()
                let value = call()
                result.withLock { $0 = value }
                done.store(true, ordering: .releasing)
                finished.signal()
                mayEnd.wait()
            }
            var handle = pthread_t()
            let created = pthread_create(
                &handle, nil,
                { context in
                    Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
                    return nil
                }, Unmanaged.passRetained(body).toOpaque())
            guard created == 0 else { throw Timeout(description: "pthread_create failed: \(created)") }
            // Detached, not joined: a call that never returns must fail the test, not hang it.
            pthread_detach(handle)
            var released = false
            defer {
                if !released { release() }
                mayEnd.signal()
            }
            guard started.wait(timeout: .now() + 10) == .success, let target = thread.withLock({ $0 }) else {
                throw Timeout(description: "the calling thread did not start within 10 s")
            }
            for _ in 0..<signals where !done.load(ordering: .acquiring) {
                let before = handled.load(ordering: .relaxed)
                pthread_kill(target, SIGUSR2)
                let deadline = DispatchTime.now() + 10
                while handled.load(ordering: .relaxed) == before {
                    guard DispatchTime.now() < deadline else {
                        throw Timeout(description: "a signal was not handled within 10 s")
                    }
                    sched_yield()
                }
            }
            released = true
            release()
            guard finished.wait(timeout: .now() + 10) == .success, let value = result.withLock({ $0 }) else {
                throw Timeout(description: "the call did not return within 10 s of its release")
            }
            return value
        }
    }

    private final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}
